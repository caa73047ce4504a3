"""The one fold of an agent's events into its pod's summary, the part the operator is sent and how it takes it,
and the one rule for restarts in place the controller has not answered yet (``AgentReport.from_summary``)."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.agent import summary as summaries
from trainguard.agent.nudge import format_nudge, parse_nudge
from trainguard.controller.backend import AgentReport, WorkerRestart


def _failure(rank: int, pid: int, exit_code: int | None) -> dict[str, Any]:
    return {"rank": rank, "local_rank": 0, "pid": pid, "exit_code": exit_code, "signal": None}


def _restarted(at: float, *failures: dict[str, Any]) -> dict[str, Any]:
    return {
        "event": "workers-restarted",
        "time": at + 0.5,
        "pid": 100,
        "attempt": 1,
        "failed_at": at,
        "failures": list(failures),
        "restarts_left": 2,
        "max_restarts": 3,
    }


EVENTS: list[dict[str, Any]] = [
    {"event": "started", "time": 10.0, "pid": 100, "attempt": 1},
    {"event": "progress", "time": 11.0, "pid": 100, "attempt": 1, "step": 3},
    _restarted(12.0, _failure(2, 300, 137), _failure(3, 301, 1)),
    {"event": "nudged", "time": 12.5, "pid": 100, "attempt": 1, "token": "w-1#4", "killed": [302]},
    {"event": "hang", "time": 15.0, "pid": 100, "attempt": 1, "signal": "log"},
    {"event": "restart-in-place", "time": 15.1, "pid": 100, "attempt": 1},
    {"event": "started", "time": 15.2, "pid": 101, "attempt": 2},
    {
        "event": "exited",
        "time": 20.0,
        "pid": 101,
        "attempt": 2,
        "exit_code": 137,
        "signal": "SIGKILL",
        "oom": True,
    },
]


def test_a_report_folds_into_one_summary_and_only_the_operators_part_is_sent() -> None:
    summary = summaries.new()
    changed = [summaries.fold(summary, event) for event in EVENTS]
    # Progress, a nudge and the end change nothing the operator keeps: no POST for them.
    assert changed == [True, False, True, False, True, True, True, False]
    assert summary == summaries.summarize(EVENTS)
    assert summaries.wire(summary) == {
        "attempt": 2,
        "hangs": 1,
        "inPlaceRestarts": 1,
        "workerRestarts": [
            {"at": 12.0, "exitCode": 137, "rank": 2, "failed": 2, "restartsLeft": 2, "maxRestarts": 3}
        ],
        "workerRestartsFrom": 0,
    }
    local = {key: summary[key] for key in summary if key not in summaries.WIRE}
    assert local == {
        "startedAt": 10.0,
        "pid": 101,
        "lastProgressAt": 11.0,
        "exited": True,
        "exitCode": 137,
        "signal": 9,
        "reason": "OOMKilled",
    }


def test_a_hang_given_up_on_ends_with_reason_hang() -> None:
    summary = summaries.summarize(
        [
            {"event": "started", "time": 1.0, "pid": 7, "attempt": 1},
            {"event": "hang", "time": 2.0, "pid": 7, "attempt": 1},
            {"event": "gave-up", "time": 3.0, "pid": 7, "attempt": 1, "reason": "Hang", "exit_code": 137},
        ]
    )
    ended = (summary["exited"], summary["exitCode"], summary["signal"], summary["reason"])
    assert ended == (True, 137, None, "Hang")


def test_only_the_latest_worker_restarts_are_kept_and_counted_from() -> None:
    events = [_restarted(float(at), _failure(0, 1000 + at, 1)) for at in range(summaries.KEPT + 3)]
    # A failure without an exit code, or without any time, is no restart.
    events += [
        _restarted(99.0, _failure(0, 1, None)),
        {**_restarted(0, _failure(0, 2, 1)), "failed_at": None, "time": None},
    ]
    summary = summaries.summarize(events)
    assert summary["workerRestartsFrom"] == 3
    assert [item["at"] for item in summary["workerRestarts"]] == [
        float(at) for at in range(3, summaries.KEPT + 3)
    ]
    agent = AgentReport.from_summary(summary, answered=0)
    assert agent.worker_restarts_from == 3
    assert agent.worker_restarts[0] == WorkerRestart(
        3.0, 1, rank=0, failed=1, restarts_left=2, max_restarts=3
    )


def test_the_operator_takes_what_the_agent_sends_field_by_field() -> None:
    sent = summaries.wire(summaries.summarize(EVENTS))
    assert summaries.parse(sent) == sent
    # An agent of before this summary sent no worker restarts until there was one.
    assert summaries.parse({"attempt": 1, "hangs": 0, "inPlaceRestarts": 0}) == {
        "attempt": 1,
        "hangs": 0,
        "inPlaceRestarts": 0,
        "workerRestarts": [],
        "workerRestartsFrom": 0,
    }
    garbled = {
        "attempt": "1",
        "hangs": -1,
        "inPlaceRestarts": True,
        "lastProgressAt": 5.0,  # not the operator's to keep
        "workerRestarts": [
            {"at": 5, "exitCode": 137, "rank": None, "failed": 2},
            {"at": "later", "exitCode": 1},
            {"at": 6.0, "exitCode": True},
            "not a restart",
        ],
    }
    assert summaries.parse(garbled) == {
        "attempt": 0,
        "hangs": 0,
        "inPlaceRestarts": 0,
        "workerRestarts": [{"at": 5.0, "exitCode": 137, "failed": 2}],
        "workerRestartsFrom": 0,
    }
    assert summaries.parse([1, 2]) is None
    assert summaries.parse(None) is None


@pytest.mark.parametrize(
    ("hangs", "restarts", "answered", "expected"),
    [
        (0, 0, 0, (0, False)),
        # The agent restarted a hung command by itself; the controller has not answered yet: still hung.
        (1, 1, 0, (0, True)),
        (1, 1, 1, (1, False)),
        (2, 2, 1, (1, True)),
        # The agent gave up on the second hang without a restart: hung until answered.
        (2, 1, 1, (1, True)),
        (2, 1, 2, (1, False)),
    ],
)
def test_only_restarts_in_place_the_controller_answered_count(
    hangs: int, restarts: int, answered: int, expected: tuple[int, bool]
) -> None:
    summary = {**summaries.new(), "hangs": hangs, "inPlaceRestarts": restarts, "lastProgressAt": 4.0}
    agent = AgentReport.from_summary(summary, answered)
    assert (agent.in_place_restarts, agent.hung, agent.last_progress_at) == (*expected, 4.0)


def test_the_nudge_line_reads_back() -> None:
    nudge = parse_nudge(format_nudge("tj-worker-1#3", 1763826309.25))
    assert nudge is not None
    assert (nudge.token, nudge.failed_at) == ("tj-worker-1#3", 1763826309.25)
