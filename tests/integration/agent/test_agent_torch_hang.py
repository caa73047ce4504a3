"""A real torch job where one rank stops calling allreduce: caught by heartbeats, restarted in place."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from agent_harness import AgentRun

pytest.importorskip("torch")
pytestmark = pytest.mark.integration

TIMEOUT = 5.0
#: trainguard's bound: a hang is acted on within the timeout plus 2 seconds.
LATENCY = TIMEOUT + 2.0
SCRIPT = Path(__file__).with_name("allreduce_hang.py")


def test_a_rank_that_stops_calling_allreduce_is_caught_and_the_job_restarted_in_place(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"
    report, marker = tmp_path / "report.jsonl", tmp_path / "marker"
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    argv = [
        sys.executable, "-m", "trainguard.agent", "--report", str(report),
        "--termination-log", str(tmp_path / "termination-log"),
        "--hang-timeout", str(TIMEOUT), "--grace", "2",
        "--", torchrun, "--standalone", "--nnodes", "1", "--nproc-per-node", "2", str(SCRIPT), str(marker),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        process = subprocess.Popen(
            argv, stdout=out, stderr=err, env=env, cwd=tmp_path, start_new_session=True
        )
    run = AgentRun(process, tmp_path, report, marker, stdout, stderr)
    try:
        assert run.wait_exit(timeout=100) == 0, run.describe()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait()
    stuck_at = run.markers("stuck")[0][1]
    hang = run.events("hang")[0]
    assert hang["signal"] == "heartbeat"
    assert hang["time"] - stuck_at <= LATENCY, f"detected {hang['time'] - stuck_at:.2f} s after the stall"
    assert [event["attempt"] for event in run.events("started")] == [1, 2]
    assert len(run.events("restart-in-place")) == 1
    assert run.events()[-1]["event"] == "exited"
    assert len(run.markers("stuck")) == 1  # the second attempt trained through
