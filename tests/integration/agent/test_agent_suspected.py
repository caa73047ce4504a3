"""Detection only (``--report-only``, what a GPU job with hang handling off gets), with the real agent: a
command that sleeps without I/O is reported as suspected and never stopped; I/O again clears it."""

from __future__ import annotations

import pytest
from agent_harness import wait_for

pytestmark = pytest.mark.integration

TIMEOUT = 1.0


def test_a_quiet_command_is_suspected_not_restarted_and_io_clears_it(start_agent, tmp_path) -> None:
    go = tmp_path / "go"
    run = start_agent(
        ["--hang-timeout", str(TIMEOUT), "--signals", "io", "--report-only", "--grace", "1"],
        ["quiet-then-io", "--go", str(go)],
    )
    pid = run.wait_event("started")["pid"]
    suspected = run.wait_event("suspected-hang")
    assert suspected["signal"] == "io"
    assert suspected["idle_seconds"] >= TIMEOUT
    assert suspected["pid"] == pid
    go.touch()
    cleared = run.wait_event("suspicion-cleared")
    assert cleared["time"] >= suspected["time"]
    wait_for(lambda: run.markers("io"), 5.0, "the command's I/O", run.describe)
    # Never stopped, never restarted: one start, no hang, the same process still running.
    assert run.process.poll() is None
    assert [event["pid"] for event in run.events("started")] == [pid]
    assert run.events("hang") == []
    assert run.events("restart-in-place") == []
    assert len(run.events("suspected-hang")) == 1
    assert b"may be suspended" in run.stderr.read_bytes()
