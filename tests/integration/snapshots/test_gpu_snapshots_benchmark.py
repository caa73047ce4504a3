"""``benchmarks/gpu_snapshots.py`` runs on CPU (``--device cpu``), as it does on a GPU: its checks pass (the state
restored is the state of the last snapshot's step, taken while training went on) and it reports every figure
the docs' table reads, in its last line and in the kept JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BENCHMARK = Path(__file__).parents[3] / "benchmarks" / "gpu_snapshots.py"
FIGURES = {"parameters", "state_mb", "bandwidth_gb_s", "checkpointer_first_s", "checkpointer_later_s", "mode",
           "every", "floor_s", "blocking_s", "blocking_ratio", "step_s", "step_with_snapshots_s", "overhead"}  # fmt: skip


def test_the_benchmark_runs_on_cpu_and_reports_every_figure(tmp_path: Path) -> None:
    command = [sys.executable, str(BENCHMARK), "--device", "cpu", "--sizes", "2M", "--rounds", "1",
               "--shm", str(tmp_path), "--disk", str(tmp_path), "--results", str(tmp_path / "results")]  # fmt: skip
    # A 2 M-parameter model: two checks and about 60 steps, seconds each on a loaded machine.
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results["checks"] == {"staged": True, "direct": True}
    figures = results["sizes"]["2000000"]
    assert figures.keys() >= FIGURES
    assert figures["mode"] == "cpu"
    assert figures["every"] == 1  # a CPU state: every step
    assert figures["blocking_s"] > 0
    assert results["machine"]["commit"]
    kept = list((tmp_path / "results").glob("gpu_snapshots-*.json"))
    assert len(kept) == 1
    assert json.loads(kept[0].read_text()) == results
