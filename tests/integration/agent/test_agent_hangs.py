"""Hang detection and restart in place, with real processes and short timeouts (1-1.5 s)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

pytestmark = pytest.mark.integration

TIMEOUT = 1.0
#: trainguard's bound: a hang is acted on within the timeout plus 2 seconds.
LATENCY = TIMEOUT + 2.0
HANG_OPTIONS = ["--hang-timeout", str(TIMEOUT), "--grace", "1"]


def test_a_job_that_stops_progressing_is_restarted_in_place(start_agent) -> None:
    run = start_agent(HANG_OPTIONS, ["stuck", "--steps", "3"])
    stuck_at = run.wait_marker("stuck")[1]
    restarted = run.wait_event("started", count=2)
    hang = run.events("hang")[0]
    assert hang["signal"] == "heartbeat"
    assert hang["time"] - stuck_at <= LATENCY
    assert restarted["time"] - stuck_at <= LATENCY
    first, again = run.events("started")
    assert again["command"] == first["command"]
    assert again["attempt"] == 2
    assert run.events("restart-in-place")[0]["consecutive"] == 1
    # The same command runs again, and knows it is a second attempt.
    run.wait_event("restart-in-place", count=2)
    assert [attempt for _, _, attempt in run.markers("stuck")][:2] == [1, 2]


def test_a_stopped_process_is_detected_and_restarted(start_agent) -> None:
    """``chaos hang`` sends SIGSTOP: no output and no CPU; a job that never heard of heartbeats."""
    run = start_agent(HANG_OPTIONS, ["chatty", "--interval", "0.1"])
    pid = run.wait_event("started")["pid"]
    run.wait_output(b"working 3")
    stopped_at = time.time()
    os.killpg(pid, signal.SIGSTOP)
    restarted = run.wait_event("started", count=2)
    assert run.events("hang")[0]["signal"] in {"log", "cpu"}
    assert restarted["time"] - stopped_at <= LATENCY
    run.wait_output(b"working 0\nworking 1", timeout=10)  # the new attempt runs and prints


def test_consecutive_hangs_end_in_gave_up_with_reason_hang(start_agent) -> None:
    run = start_agent([*HANG_OPTIONS, "--max-consecutive", "2"], ["stuck", "--steps", "2"])
    assert run.wait_exit(timeout=30) == 137
    kinds = [event["event"] for event in run.events() if event["event"] != "progress"]
    assert kinds == ["started", "hang", "restart-in-place"] * 2 + ["started", "hang", "gave-up"]
    gave_up = run.events()[-1]
    assert gave_up["reason"] == "Hang"
    assert gave_up["exit_code"] == 137
    assert gave_up["hang_restarts"] == 2
    assert json.loads((run.directory / "termination-log").read_text())["event"] == "gave-up"


def test_progress_beyond_the_last_hang_starts_the_count_again(start_agent) -> None:
    """Stuck at step 2, then 4, then done at the third attempt: one restart allowed in a row is enough."""
    run = start_agent(
        [*HANG_OPTIONS, "--max-consecutive", "1"],
        ["stuck", "--steps", "2", "--advance", "--exit-on-attempt", "3"],
    )
    assert run.wait_exit(timeout=30) == 0
    assert len(run.events("restart-in-place")) == 2
    assert [event["consecutive"] for event in run.events("restart-in-place")] == [1, 1]


@pytest.mark.parametrize("by", ["heartbeat", "output"])
def test_a_slow_but_progressing_job_is_never_restarted(start_agent, by: str) -> None:
    run = start_agent(["--hang-timeout", "1.5"], ["slow", "--steps", "6", "--interval", "0.6", "--by", by])
    assert run.wait_exit() == 0, run.describe()
    assert run.events("hang") == []
    assert len(run.events("started")) == 1


def test_a_silent_job_that_heartbeats_is_never_restarted(start_agent) -> None:
    """No output and hardly any CPU for several timeouts, but heartbeats: not a hang."""
    run = start_agent(HANG_OPTIONS, ["slow", "--steps", "12", "--interval", "0.3", "--by", "heartbeat"])
    assert run.wait_exit() == 0, run.describe()
    assert run.events("hang") == []
    assert run.events("progress"), "heartbeats are reported as progress"


def test_a_job_that_prints_but_stopped_heartbeating_is_caught(start_agent) -> None:
    run = start_agent(HANG_OPTIONS, ["chatty", "--interval", "0.1", "--heartbeats", "3"])
    stopped_at = run.wait_marker("heartbeats-stopped")[1]
    hang = run.wait_event("hang")
    assert hang["signal"] == "heartbeat"
    assert hang["time"] - stopped_at <= LATENCY


def test_the_cpu_signal_catches_a_silent_job_that_went_idle(start_agent) -> None:
    run = start_agent([*HANG_OPTIONS, "--signals", "cpu"], ["busy-then-idle", "--busy", "1.5"])
    idle_at = run.wait_marker("idle")[1]
    hang = run.wait_event("hang")
    assert hang["signal"] == "cpu"
    assert hang["time"] - idle_at <= LATENCY
    assert hang["time"] - run.events("started")[0]["time"] >= 1.5 + TIMEOUT - 0.5  # not while it was busy


def test_without_a_hang_timeout_the_agent_only_supervises(start_agent) -> None:
    run = start_agent(["--grace", "1"], ["stuck", "--steps", "2"])
    run.wait_marker("stuck")
    with pytest.raises(AssertionError, match="timed out"):
        run.wait_event("hang", timeout=2 * TIMEOUT + 1)
    run.process.send_signal(signal.SIGTERM)
    assert run.wait_exit() == 143
