"""The agent's watchers (``trainguard.agent.watchers``), one channel each, polled by hand on real files: what
each reports and what it tells the loop (an exit asked for, a hang). The loop itself, with real processes, is
tested in tests/integration/agent."""

from __future__ import annotations

import json
import os
from pathlib import Path

from trainguard.agent.config import AgentConfig
from trainguard.agent.control import write_exit_request
from trainguard.agent.detector import HangStreak
from trainguard.agent.heartbeats import HeartbeatReader
from trainguard.agent.report import Reporter
from trainguard.agent.watchers.base import ExitRequested, Hung, Tick
from trainguard.agent.watchers.control import ControlWatcher
from trainguard.agent.watchers.hangs import HangWatcher
from trainguard.agent.watchers.workers import WorkerEventsWatcher
from trainguard.pod import workerevents
from trainguard.pod.hangsignal import HangSignal


def _events(report: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []


def test_an_exit_code_asked_for_ends_the_run_and_a_bad_request_is_said(tmp_path: Path) -> None:
    said: list[str] = []
    control = ControlWatcher(tmp_path / "control", said.append)
    control.start(0.0)
    assert control.poll(Tick(1.0, 7, 1)) is None
    write_exit_request(tmp_path / "control", 3)
    assert control.poll(Tick(2.0, 7, 1)) == ExitRequested(3)
    (tmp_path / "control").write_text("not json")
    assert control.poll(Tick(3.0, 7, 1)) is None
    (words,) = said
    assert words.startswith("ignoring a request:")


def test_worker_events_hold_hang_detection_while_a_round_forms_and_report_the_restarts(
    tmp_path: Path,
) -> None:
    report = tmp_path / "report.jsonl"
    held: list[float] = []
    path = str(tmp_path / "workers.jsonl")
    watcher = WorkerEventsWatcher(path, Reporter(report, None), nudged={41}, hold=held.append)
    watcher.start(0.0)
    workerevents.append(path, workerevents.FORMING)
    watcher.poll(Tick(1.0, 7, 2))
    watcher.poll(Tick(2.0, 7, 2))
    assert held == [1.0, 1.0, 2.0]  # the line itself, then on every poll while the round forms
    failures = [workerevents.failure(0, 0, 41, -9), workerevents.failure(1, 1, 42, 1)]
    workerevents.append(path, workerevents.STARTED)
    workerevents.append(path, workerevents.FAILED, failures=failures, restarts_left=2, max_restarts=3)
    watcher.poll(Tick(3.0, 7, 2))
    watcher.poll(Tick(4.0, 7, 2))
    assert held == [1.0, 1.0, 2.0, 3.0]
    (restarted,) = _events(report)
    assert restarted["event"] == "workers-restarted"
    assert (restarted["pid"], restarted["attempt"], restarted["restarts_left"]) == (7, 2, 2)
    assert [item["pid"] for item in restarted["failures"]] == [42]  # 41 was killed for a nudge


def test_hangs_report_progress_and_end_the_run_on_a_hang(tmp_path: Path) -> None:
    report = tmp_path / "report.jsonl"
    config = AgentConfig(command=("true",), hang_timeout=5.0, signals=frozenset({HangSignal.HEARTBEAT}))
    beats = tmp_path / "beats"
    beats.mkdir()
    said: list[str] = []
    hangs = HangWatcher(
        config, HangStreak(3), HeartbeatReader(beats), lambda: None, Reporter(report, None), said.append
    )
    hangs.start(100.0)
    (beats / "rank-0.json").write_text(json.dumps({"step": 1, "time": 1.0, "pid": os.getpid(), "rank": 0}))
    assert hangs.poll(Tick(101.0, 7, 1)) is None
    (progress,) = _events(report)
    assert (progress["event"], progress["step"], progress["pid"]) == ("progress", 1, 7)
    hung = hangs.poll(Tick(107.0, 7, 1))
    assert isinstance(hung, Hung)
    assert hung.hang.signal is HangSignal.HEARTBEAT
    hangs.start(200.0)  # a new run of the command: a new detector
    hangs.rebase(210.0)
    assert hangs.poll(Tick(212.0, 8, 2)) is None


def test_report_only_reports_a_suspected_hang_once_never_ends_the_run_and_clears_on_progress(
    tmp_path: Path,
) -> None:
    report = tmp_path / "report.jsonl"
    config = AgentConfig(
        command=("true",), hang_timeout=5.0, signals=frozenset({HangSignal.LOG}), report_only=True
    )
    beats = tmp_path / "beats"
    beats.mkdir()
    output: list[float | None] = [None]
    said: list[str] = []
    hangs = HangWatcher(
        config, HangStreak(3), HeartbeatReader(beats), lambda: output[0], Reporter(report, None), said.append
    )
    hangs.start(100.0)
    for now in (101.0, 106.0, 107.0, 110.0):
        assert hangs.poll(Tick(now, 7, 1)) is None  # never ends the run
    (suspected,) = _events(report)
    assert (suspected["event"], suspected["signal"], suspected["idle_seconds"]) == (
        "suspected-hang",
        "log",
        6.0,
    )
    output[0] = 111.0
    assert hangs.poll(Tick(111.0, 7, 1)) is None
    assert [event["event"] for event in _events(report)] == ["suspected-hang", "suspicion-cleared"]
    assert "may be suspended" in said[0]
