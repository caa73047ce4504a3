"""Live re-formations (``AgentReport.live_rounds``, ``trainguard.controller.live``): every pod of a round reports
it, the job records it once, in order, as a ``reformed`` history entry with typed fields and a Normal
``LiveReformed`` Event, completed by what pods report of it later; the first formation is no re-formation;
nothing is restarted or counted. A pod whose workers do not use live mode gets the job one ``LiveModeUnused``
Warning, whatever happens after."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.unit.controller.harness import Harness, worker_job
from trainguard.controller import EmitEvent, JobStatus, LiveRound
from trainguard.controller.live import after_words, describe
from trainguard.controller.status import HistoryKind, LiveOrigin, Reformation, ReformCause
from trainguard.policy.types import Remedy

M0, W0, W1 = "job-master-0", "job-worker-0", "job-worker-1"
CAUSE = "DistStoreError: round 2 began"


def _round(number: int, rank: int, *, origin: str = "live", cause: str | None = CAUSE, at: float = 100.0,
           world: int = 3, step: int = 40, seconds: float = 0.3) -> LiveRound:  # fmt: skip
    return LiveRound(
        at=at + number,
        round=number,
        world_size=world,
        step=step,
        origin=LiveOrigin(origin),
        rank=rank,
        seconds=seconds,
        cause=cause,
    )


def _recorded(h: Harness) -> list[Reformation]:
    entries = [e for e in h.status.history if e.kind is HistoryKind.REFORMED]
    assert all(e.action is Remedy.NONE and not e.counted and e.pod is None for e in entries)
    return [e.reformation for e in entries if e.reformation is not None]


def _events(h: Harness, reason: str) -> list[EmitEvent]:
    return [
        action
        for result in h.results
        for action in result.actions
        if isinstance(action, EmitEvent) and action.reason == reason
    ]


@dataclass(frozen=True)
class Case:
    id: str
    #: Reports given to pods, in turns: each turn is (pod, rounds), followed by one reconcile.
    turns: tuple[tuple[tuple[str, tuple[LiveRound, ...]], ...], ...]
    #: (round, world size, step, origin, cause) of the entries recorded, in order.
    expected: tuple[tuple[int, int | None, int | None, LiveOrigin, str | None], ...]
    #: The agents keep only their latest N rounds (None: all).
    keep: int | None = None


CASES = [
    Case(
        "the first formation is no re-formation",
        (((M0, (_round(1, 0, cause=None),)), (W0, (_round(1, 1, cause=None),))),),
        (),
    ),
    Case(
        "one round reported by every pod is recorded once",
        (
            (
                (M0, (_round(1, 0, cause=None), _round(2, 0))),
                (W0, (_round(1, 1, cause=None), _round(2, 1))),
                (W1, (_round(1, 2, cause=None), _round(2, 2))),
            ),
        ),
        ((2, 3, 40, LiveOrigin.LIVE, CAUSE),),
    ),
    Case(
        "the pods of a round report it at different reconciles: once",
        (((M0, (_round(2, 0),)),), ((W0, (_round(2, 1),)),), ((W1, (_round(2, 2),)),)),
        ((2, 3, 40, LiveOrigin.LIVE, CAUSE),),
    ),
    Case(
        "a newcomer received the state: peer, with the survivors' cause and rank 0's figures",
        (
            (
                (W1, (_round(3, 2, origin="peer", cause=None, world=3, step=41, seconds=9.0),)),
                (M0, (_round(3, 0, world=3, step=40),)),
            ),
        ),
        ((3, 3, 40, LiveOrigin.PEER, CAUSE),),
    ),
    Case(
        "a newcomer's pod reports after the round was recorded: its entry says peer",
        (((M0, (_round(3, 0),)),), ((W1, (_round(3, 2, origin="peer", cause=None),)),)),
        ((3, 3, 40, LiveOrigin.PEER, CAUSE),),
    ),
    Case(
        "a survivor's pod reports after a newcomer's: its cause fills in the entry",
        (((W1, (_round(2, 2, origin="peer", cause=None),)),), ((M0, (_round(2, 0),)),)),
        ((2, 3, 40, LiveOrigin.PEER, CAUSE),),
    ),
    Case(
        "a newcomer's pod reports its round after the next round was recorded: that round's entry says peer",
        (((M0, (_round(2, 0),)),), ((M0, (_round(3, 0),)),), ((W1, (_round(2, 2, origin="peer"),)),)),
        ((2, 3, 40, LiveOrigin.PEER, CAUSE), (3, 3, 40, LiveOrigin.LIVE, CAUSE)),
    ),
    Case(
        "without rank 0's word: the first report that names a cause",
        (((W1, (_round(2, 2, origin="peer", cause=None, step=9),)), (W0, (_round(2, 1, step=12),))),),
        ((2, 3, 12, LiveOrigin.PEER, CAUSE),),
    ),
    Case(
        "several rounds in one report, recorded in order",
        (((M0, (_round(4, 0, world=2), _round(2, 0), _round(3, 0, world=4))),),),
        (
            (2, 3, 40, LiveOrigin.LIVE, CAUSE),
            (3, 4, 40, LiveOrigin.LIVE, CAUSE),
            (4, 2, 40, LiveOrigin.LIVE, CAUSE),
        ),
    ),
    Case(
        "an older round reported after a newer one was recorded: not recorded",
        (((M0, (_round(3, 0),)),), ((W0, (_round(2, 1),)),)),
        ((3, 3, 40, LiveOrigin.LIVE, CAUSE),),
    ),
    Case(
        "nobody held a state: where it came from",
        (((M0, (_round(5, 0, origin="disk", cause=None),)),),),
        ((5, 3, 40, LiveOrigin.DISK, None),),
    ),
    Case(
        "an agent that keeps only its latest two rounds: none lost, none twice",
        tuple(((M0, (_round(n, 0),)), (W0, (_round(n, 1),))) for n in range(2, 7)),
        tuple((n, 3, 40, LiveOrigin.LIVE, CAUSE) for n in range(2, 7)),
        keep=2,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_each_live_round_is_recorded_once_per_job_and_counts_nothing(case: Case) -> None:
    h = Harness.start(worker_job(2))
    h.running()
    for turn in case.turns:
        for pod, rounds in turn:
            h.cluster.reform(pod, *rounds, keep=case.keep)
        h.tick()
    for _ in range(3):
        h.tick()
    recorded = _recorded(h)
    assert [(r.round, r.world_size, r.step, r.origin, r.cause) for r in recorded] == list(case.expected)
    events = _events(h, "LiveReformed")
    assert [e.type.value for e in events] == ["Normal"] * len(recorded)
    assert [e.pod for e in events] == [None] * len(recorded)
    assert all(f"as round {r.round} " in e.message for r, e in zip(recorded, events, strict=True))
    # The entry's words say what its fields say (a completed entry is worded again).
    for entry in (e for e in h.status.history if e.kind is HistoryKind.REFORMED):
        assert entry.reformation is not None
        received = "received the state" in entry.reason or "received it" in entry.reason
        assert received == (entry.reformation.origin is LiveOrigin.PEER), entry.reason
        assert "Error" not in entry.reason  # never a member's exception: the job's words
    # Not restarts: no pod was relaunched, nothing counted.
    assert h.status.restart_counts == {"master": 0, "worker": 0}
    assert [(p.restarts, p.hang_restarts, p.generation) for p in h.status.pods] == [(0, 0, 1)] * 3
    reported = [r.round for turn in case.turns for _, rounds in turn for r in rounds]
    assert h.status.live_round == max(reported)


def test_an_entry_holds_its_round_in_typed_fields_through_a_stored_status() -> None:
    h = Harness.start(worker_job(2))
    h.running()
    h.cluster.reform(M0, _round(2, 0, seconds=0.25))
    h.cluster.reform(W1, _round(2, 2, origin="peer", cause=None))
    h.tick()
    stored = h.status.to_dict()
    (entry,) = [e for e in stored["history"] if e["kind"] == "reformed"]
    assert entry["action"] == "none"
    assert entry["reformation"] == {
        "round": 2,
        "worldSize": 3,
        "step": 40,
        "origin": "peer",
        "cause": CAUSE,
        "seconds": 0.25,
        "after": None,
        "afterPods": [],
        "worldBefore": None,
    }
    assert "round 2" in entry["reason"]
    # A controller that restarts from the stored status records nothing again.
    h.status = JobStatus.from_dict(stored)
    for _ in range(3):
        h.tick()
    assert [r.round for r in _recorded(h)] == [2]
    assert len(_events(h, "LiveReformed")) == 1


def test_a_script_that_does_not_use_live_mode_is_warned_about_once_per_job() -> None:
    h = Harness.start(worker_job(2))
    h.running()
    h.cluster.live_unused(W0)
    h.tick()
    h.cluster.live_unused(W1)
    for _ in range(3):
        h.tick()
    h.status = JobStatus.from_dict(h.status.to_dict())  # a controller that restarted remembers it
    for _ in range(2):
        h.tick()
    (warning,) = _events(h, "LiveModeUnused")
    assert warning.type.value == "Warning"
    assert warning.pod is None
    for words in ("live mode", "trainguard.io/live", "trainguard.Live", W0, "torchrun's elastic agent",
                  "docs/sdk.md", "remove the annotation"):  # fmt: skip
        assert words in warning.message, words
    assert h.status.live_unused_warned
    assert not [e for e in h.status.history if e.kind is HistoryKind.REFORMED]
    assert h.status.restart_counts == {"master": 0, "worker": 0}


def _formed(h: Harness, number: int, world: int, origin: str = "live") -> Reformation:
    """Rank 0 reports round ``number`` formed now (with a member's exception as its cause); the entry."""
    cut = "RuntimeError: Connection closed by peer [127.0.0.1]:7596. This is typically caused by a remote wor"
    h.cluster.reform(M0, _round(number, 0, world=world, origin=origin, cause=cut, at=h.cluster.now - number))
    h.tick()
    (entry,) = [e for e in h.status.history if e.reformation is not None and e.reformation.round == number]
    assert "RuntimeError" not in entry.reason, entry.reason
    assert "Connection closed" not in entry.reason, entry.reason
    assert entry.reformation is not None
    return entry.reformation


def test_a_round_says_what_made_it_in_the_jobs_words() -> None:
    h = Harness.start(worker_job(2, minReplicas=1, maxReplicas=3))
    h.running()
    h.tick()
    # A worker of worker-1 failed (its pod goes on): the survivors form round 2 without it.
    h.cluster.restart_workers(W1, 137)
    h.tick()
    formed = _formed(h, 2, world=2)
    assert (formed.after, formed.after_pods) == ("fault", (W1,))
    assert "after job-worker-1 failed: 2 workers at step 40, every member kept its own state" in describe(
        formed
    )
    # Its replacement joins: round 3 of 3, the state from a survivor.
    h.tick()
    formed = _formed(h, 3, world=3, origin="peer")
    assert (formed.after, formed.world_before) == ("joined", 2)
    assert "as newcomers joined" in describe(formed)
    assert "the newcomers received the state from a member that held it" in describe(formed)
    # A scale-in removes worker-1: round 4 of 2.
    h.cluster.scale("worker", 1)
    h.tick()
    h.tick()
    formed = _formed(h, 4, world=2)
    assert (formed.after, formed.after_pods) == ("scale-in", (W1,))
    assert "after the scale-in that removed job-worker-1:" in describe(formed)
    # A scale-out adds it again: round 5 of 3.
    h.cluster.scale("worker", 2)
    h.tick()
    h.tick()
    formed = _formed(h, 5, world=3, origin="peer")
    assert (formed.after, formed.after_pods) == ("scale-out", (W1,))
    assert "after the scale-out that added job-worker-1: 3 workers" in describe(formed)
    # A member one step behind after a fault: said so, not "newcomers".
    h.cluster.restart_workers(W0, 137)
    h.tick()
    formed = _formed(h, 6, world=2, origin="peer")
    assert "a member one step behind received the state from one that had applied that step" in describe(
        formed
    )


@pytest.mark.parametrize(
    ("pods", "words"),
    [
        ((), " after a member failed"),
        (("a",), " after a failed"),
        (("a", "b"), " after a and b failed"),
        (("a", "b", "c"), " after a, b and c failed"),
    ],
)
def test_the_failed_pods_are_named_as_a_person_lists_them(pods: tuple[str, ...], words: str) -> None:
    assert after_words(ReformCause.FAULT, pods) == words
