"""The one fold of an agent's events into its pod's summary, the part the operator is sent and how it takes it,
and the one rule for restarts in place the controller has not answered yet (``AgentReport.from_summary``)."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.agent.nudge import format_nudge, parse_nudge
from trainguard.controller.reports import AgentReport, LiveRound, WorkerRestart
from trainguard.controller.status import LiveOrigin
from trainguard.pod import summary as summaries
from trainguard.pod import summaryfields


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
        "liveRounds": [],
        "liveRoundsFrom": 0,
        "liveUnused": False,
        **NO_CHECKS,
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
        "liveRounds": [],
        "liveRoundsFrom": 0,
        "liveUnused": False,
        **NO_CHECKS,
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
        "liveRounds": [],
        "liveRoundsFrom": 0,
        "liveUnused": False,
        **NO_CHECKS,
    }
    assert summaries.parse([1, 2]) is None
    assert summaries.parse(None) is None


@pytest.mark.parametrize(
    ("sent", "taken"),
    [
        ("the image has no python3 (PATH=/bin)", "the image has no python3 (PATH=/bin)"),
        ("  padded  ", "padded"),
        ("x" * 600, "x" * 500),
        ("", None),
        ("   ", None),
        (None, None),
        (3, None),
        (["no python3"], None),
    ],
)
def test_the_entrys_word_that_the_agent_is_missing_is_taken_as_one_bounded_sentence(
    sent: object, taken: str | None
) -> None:
    parsed = summaries.parse({"agentMissing": sent})
    assert parsed is not None
    assert parsed["agentMissing"] == taken
    assert summaries.read(parsed).agent_missing == taken


#: What a summary holds of fault tolerance checks and ranks' work before the agent reported any (and of the
#: entry's word that there is no agent).
NO_CHECKS = {
    "checks": 0,
    "lastCheck": None,
    "failedCheck": None,
    "ranks": [],
    "suspectedHang": None,
    "spares": None,
    "agentMissing": None,
}


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


def _reformed(number: int | None, rank: int, **fields: Any) -> dict[str, Any]:
    """A ``live-reformed`` event as the agent reports a worker's ``reformed`` line."""
    return {
        "event": "live-reformed",
        "time": 50.0 + (number or 0),
        "pid": 100,
        "attempt": 1,
        "worker_pid": 300 + rank,
        "round": number,
        "rank": rank,
        "world_size": 3,
        "step": 40,
        "origin": "live",
        "source": None,
        "seconds": 0.25,
        "transfer_seconds": 0.0,
        "bytes": 0,
        "cause": "RuntimeError: Connection closed by peer",
        "at": 49.5 + (number or 0),
        **fields,
    }


def _kept(summary: dict[str, Any]) -> list[tuple[int, int | None, str | None]]:
    return [(item["round"], item.get("rank"), item.get("origin")) for item in summary["liveRounds"]]


@pytest.mark.parametrize(
    ("events", "kept", "changed"),
    [
        pytest.param([_reformed(2, 0)], [(2, 0, "live")], [True], id="one round"),
        # A pod with two workers writes each round twice: one entry, rank 0's if it is among them.
        pytest.param(
            [_reformed(2, 1), _reformed(2, 0, origin="peer"), _reformed(3, 0), _reformed(3, 1)],
            [(2, 0, "peer"), (3, 0, "live")],
            [True, True, True, False],
            id="two workers a round: rank 0 kept",
        ),
        pytest.param(
            [_reformed(4, 2, origin="peer"), _reformed(4, 1)],
            [(4, 2, "peer")],
            [True, False],
            id="no rank 0 in the pod: the first kept",
        ),
        # A line without a round or a time is no round.
        pytest.param(
            [_reformed(None, 0), {**_reformed(5, 0), "at": None, "time": None}, _reformed(6, 0, at="late")],
            [(6, 0, "live")],
            [False, False, True],
            id="no round or no time: dropped; a bad at, the report's time",
        ),
    ],
)
def test_live_rounds_fold_into_one_entry_per_round(
    events: list[dict[str, Any]], kept: list[tuple[int, int | None, str | None]], changed: list[bool]
) -> None:
    summary = summaries.new()
    assert [summaries.fold(summary, event) for event in events] == changed
    assert _kept(summary) == kept
    assert summaries.parse(summaries.wire(summary)) == summaries.wire(summary)


def test_a_live_round_keeps_its_fields_typed_and_reaches_the_controller() -> None:
    summary = summaries.summarize([_reformed(2, 0), _reformed(2, 1)])
    assert summary["liveRounds"] == [
        {
            "at": 51.5,
            "round": 2,
            "worldSize": 3,
            "step": 40,
            "origin": "live",
            "rank": 0,
            "seconds": 0.25,
            "cause": "RuntimeError: Connection closed by peer",
        }
    ]
    agent = AgentReport.from_summary(summaries.parse(summaries.wire(summary)) or {}, answered=0)
    assert agent.live_rounds == (
        LiveRound(51.5, 2, world_size=3, step=40, origin=LiveOrigin.LIVE, rank=0, seconds=0.25,
                  cause="RuntimeError: Connection closed by peer"),
    )  # fmt: skip
    assert (agent.live_rounds_from, agent.live_unused) == (0, False)
    # A summary of before live rounds, and a word the controller does not know.
    assert AgentReport.from_summary({**summaries.new(), "liveRounds": [{"at": 1.0, "round": 2,
                                     "origin": "telepathy"}]}, 0).live_rounds == (LiveRound(1.0, 2),)  # fmt: skip
    old = {key: value for key, value in summaries.new().items() if not key.startswith("live")}
    assert AgentReport.from_summary(old, 0).live_rounds == ()


def test_only_the_latest_live_rounds_are_kept_and_counted_from() -> None:
    summary = summaries.summarize([_reformed(n, 0) for n in range(1, summaries.KEPT + 4)])
    assert summary["liveRoundsFrom"] == 3
    assert [item["round"] for item in summary["liveRounds"]] == list(range(4, summaries.KEPT + 4))
    assert AgentReport.from_summary(summary, 0).live_rounds_from == 3


def test_a_worker_that_never_formed_a_round_marks_the_pod_unused_once() -> None:
    unused = {"event": "live-unused", "time": 7.0, "pid": 100, "attempt": 1, "local_rank": 0, "exit_code": 1}
    summary = summaries.new()
    assert [summaries.fold(summary, unused), summaries.fold(summary, unused)] == [True, False]
    assert summaries.wire(summary)["liveUnused"] is True
    assert AgentReport.from_summary(summary, 0).live_unused


@pytest.mark.parametrize(
    ("sent", "taken"),
    [
        pytest.param(
            {
                "liveRounds": [
                    {
                        "at": 5,
                        "round": 2,
                        "worldSize": "3",
                        "step": 7,
                        "origin": 4,
                        "rank": True,
                        "seconds": "fast",
                        "cause": None,
                    }
                ]
            },
            {"liveRounds": [{"at": 5.0, "round": 2, "step": 7}], "liveRoundsFrom": 0, "liveUnused": False},
            id="fields of the wrong type are left out",
        ),
        pytest.param(
            {
                "liveRounds": [
                    {"at": "later", "round": 2},
                    {"at": 5.0},
                    {"at": 5.0, "round": 2.5},
                    "a round",
                ],
                "liveRoundsFrom": -1,
                "liveUnused": "yes",
            },
            {"liveRounds": [], "liveRoundsFrom": 0, "liveUnused": False},
            id="no time or no round: dropped",
        ),
        pytest.param(
            {
                "liveRounds": [{"at": 1.0, "round": n} for n in range(40)],
                "liveRoundsFrom": 2,
                "liveUnused": True,
            },
            {
                "liveRounds": [{"at": 1.0, "round": n} for n in range(8, 40)],
                "liveRoundsFrom": 10,
                "liveUnused": True,
            },
            id="only the latest 32 taken",
        ),
        pytest.param(
            {"liveRounds": [{"at": 1.0, "round": 2, "cause": "E: " + "x" * 500}]},
            {
                "liveRounds": [
                    {"at": 1.0, "round": 2, "cause": ("E: " + "x" * 500)[: summaryfields.CAUSE_LIMIT]}
                ],
                "liveRoundsFrom": 0,
                "liveUnused": False,
            },
            id="a long cause is cut",
        ),
    ],
)
def test_the_operator_takes_live_rounds_field_by_field(sent: dict[str, Any], taken: dict[str, Any]) -> None:
    parsed = summaries.parse({"attempt": 1, "hangs": 0, "inPlaceRestarts": 0, **sent})
    assert parsed is not None
    assert {key: parsed[key] for key in taken} == taken


def test_the_nudge_line_reads_back() -> None:
    nudge = parse_nudge(format_nudge("tj-worker-1#3", 1763826309.25))
    assert nudge is not None
    assert (nudge.token, nudge.failed_at) == ("tj-worker-1#3", 1763826309.25)


def test_a_suspected_hang_is_a_field_that_clears_and_crosses_the_wire() -> None:
    suspected = {"event": "suspected-hang", "time": 5.0, "signal": "io", "idle_seconds": 12.5}
    summary = summaries.summarize([{"event": "started", "time": 1.0, "attempt": 1, "pid": 9}, suspected])
    assert summary["suspectedHang"] == {"signal": "io", "idleSeconds": 12.5}
    assert summary["hangs"] == 0  # nothing counted
    assert summaries.read(
        summaries.parse(summaries.wire(summary)) or {}
    ).suspected_hang == summaries.SuspectedHang("io", 12.5)
    assert summaries.fold(summary, {"event": "suspicion-cleared", "time": 9.0}) is True
    assert summary["suspectedHang"] is None
    assert summaries.read(summaries.parse(summaries.wire(summary)) or {}).suspected_hang is None
    parsed = summaries.parse({"suspectedHang": {"signal": 3}})
    assert parsed is not None
    assert parsed["suspectedHang"] is None


@pytest.mark.parametrize(
    ("ready", "wanted", "kept"),
    [
        (0, 1, True),
        (1, 1, True),
        (2, 3, True),
        (2, 1, False),
        (-1, 1, False),
        ("1", 1, False),
        (None, 1, False),
    ],
)
def test_a_pods_spares_are_a_field_that_crosses_the_wire_when_they_make_sense(
    ready: object, wanted: object, kept: bool
) -> None:
    told = {"event": "spares", "time": 5.0, "ready": ready, "wanted": wanted}
    summary = summaries.summarize([{"event": "started", "time": 1.0, "attempt": 1, "pid": 9}, told])
    read = summaries.read(summaries.parse(summaries.wire(summary)) or {}).spares
    assert read == (summaries.Spares(ready, wanted) if kept else None)  # type: ignore[arg-type]
    assert summaries.fold(summary, told) is False  # the same again: nothing new to send
