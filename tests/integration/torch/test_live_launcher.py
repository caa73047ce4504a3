"""The live launcher (``python -m trainguard.pod.torchrun --live``) with real processes: a worker that fails
before its first round for a reason of its own (not the static world's failure of a script without
``trainguard.Live``) is started again, and the pod is not switched to torchrun's elastic agent; its stderr
reaches the pod's as it comes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

SRC = str(Path(__file__).parents[3] / "src")

#: Fails on its first start with an error of its own, before any round; then ends well.
SCRIPT = """
import pathlib, sys
seen = pathlib.Path(sys.argv[1])
if not seen.exists():
    seen.write_text("started")
    print("RuntimeError: the data set is not mounted yet", file=sys.stderr, flush=True)
    sys.exit(3)
print("second start: done", file=sys.stderr, flush=True)
"""


def test_a_worker_that_fails_before_its_first_round_for_its_own_reason_is_started_again_in_live_mode(
    tmp_path: Path,
) -> None:
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # the job's store
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    events = tmp_path / "events.jsonl"
    env = dict(os.environ, PYTHONPATH=SRC, TRAINGUARD_WORKER_EVENTS=str(events), TRAINGUARD_GENERATION="1")
    done = subprocess.run(
        [sys.executable, "-m", "trainguard.pod.torchrun", "--live", "--nnodes", "1", "--nproc-per-node", "1",
         "--max-restarts", "2", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "t",
         str(script), str(tmp_path / "seen")],
        env=env, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the data set is not mounted yet" in done.stderr  # relayed as it came
    assert "second start: done" in done.stderr
    assert "running the workers under torchrun's elastic agent instead" not in done.stderr
    written = [json.loads(line) for line in events.read_text().splitlines()]
    assert not [e for e in written if e.get("event") == "live-unused"], written
    (failed,) = [e for e in written if e.get("event") == "failed"]
    assert failed["restarts_left"] == 1
    del store  # served to the end: the launcher marked its failed worker gone there
