"""Job admission, decided once in the engine for every backend (``trainguard.controller.admission``): the
decision table (fits, started, held already, kind of limit) and how each kind counts and words a held job."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.api import TrainingJob
from trainguard.controller import JobPhase, JobStatus
from trainguard.controller.admission import (
    MACHINE,
    STATUS_OBJECT,
    Admit,
    Hold,
    LimitKind,
    Oversize,
    PodLimit,
    admit,
    count,
    is_held,
    oversize,
)

NOW = 1_000.0


def _job(**roles: dict[str, Any]) -> TrainingJob:
    specs = {role: {"template": {"spec": {"containers": [{"name": "m", "image": "i"}]}}, **spec}
             for role, spec in roles.items()}  # fmt: skip
    return TrainingJob.model_validate(
        {
            "metadata": {"name": "big", "uid": "u1"},
            "spec": {"frameworkType": "generic", "replicaSpecs": specs},
        }
    )


def _words(over: Oversize) -> str:
    return f"{over.pods} > {over.limit}"


BIG = _job(worker={"replicas": 3})  # 3 pods, against a limit of 2
ELASTIC = _job(worker={"replicas": 1, "minReplicas": 1, "maxReplicas": 3})  # 1 now, 3 at its largest
STARTED = JobStatus(started_at=5.0)


def _held(kind: LimitKind, message: str) -> JobStatus:
    return JobStatus(reason=kind.reason, message=message)


# ---- the decision table ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "job", "status", "expected"),
    [
        # Fits: reconciled; fresh when its stored status is a held one.
        (STATUS_OBJECT, _job(worker={"replicas": 2}), JobStatus(), Admit(fresh=False)),
        (STATUS_OBJECT, _job(worker={"replicas": 2}), _held(STATUS_OBJECT, "x"), Admit(fresh=True)),
        (MACHINE, _job(worker={"replicas": 2}), _held(MACHINE, "x"), Admit(fresh=True)),
        (MACHINE, _job(worker={"replicas": 2}), _held(STATUS_OBJECT, "x"), Admit(fresh=False)),
        (STATUS_OBJECT, _job(worker={"replicas": 2}), STARTED, Admit(fresh=False)),
        # Counted at its largest on one kind, at its replicas on the other.
        (MACHINE, ELASTIC, JobStatus(), Admit(fresh=False)),
        # Started and past the limit: held (status left alone) on one kind, reconciled on the other.
        (MACHINE, BIG, STARTED, Admit(fresh=False)),
    ],
)
def test_admitted(kind: LimitKind, job: TrainingJob, status: JobStatus, expected: Admit) -> None:
    assert admit(job, status, PodLimit(2, kind), _words, NOW) == expected


@pytest.mark.parametrize("kind", [STATUS_OBJECT, MACHINE])
def test_a_new_job_past_the_limit_is_held_with_its_status_and_one_event(kind: LimitKind) -> None:
    held = admit(BIG, JobStatus(), PodLimit(2, kind), _words, NOW)
    assert isinstance(held, Hold)
    message = "3 > 2" if kind is STATUS_OBJECT else "job big waits: 3 > 2"
    assert held.message == message
    assert held.status is not None
    assert (held.status.phase, held.status.reason, held.status.message) == (
        JobPhase.PENDING,
        kind.reason,
        message,
    )
    assert (held.status.started_at, held.status.pods) == (None, ())
    conditions = [
        (c.type, c.status, c.reason, c.message, c.last_transition_time) for c in held.status.conditions
    ]
    assert conditions == ([(JobPhase.PENDING, "True", kind.reason, message, NOW)] if kind.condition else [])
    assert held.event is not None
    assert (held.event.key, held.event.type.value, held.event.reason) == (
        "u1/held/3",
        "Warning",
        kind.event_reason,
    )
    assert (held.event.message, held.event.at) == ("3 > 2", NOW)  # the words; the status may say more
    # Stored, it reads as held, and the next decision has nothing to do.
    assert is_held(held.status, kind)
    assert admit(BIG, held.status, PodLimit(2, kind), _words, NOW + 1) == Hold(message, None, None)


def test_a_held_job_of_another_size_is_said_again() -> None:
    first = admit(BIG, JobStatus(), PodLimit(2, MACHINE), _words, NOW)
    assert isinstance(first, Hold)
    assert first.status is not None
    bigger = admit(_job(worker={"replicas": 4}), first.status, PodLimit(2, MACHINE), _words, NOW)
    assert isinstance(bigger, Hold)
    assert bigger.status is not None
    assert bigger.event is not None
    assert bigger.event.key == "u1/held/4"


def test_a_started_job_past_a_status_object_limit_keeps_its_status_and_gets_the_event() -> None:
    held = admit(BIG, STARTED, PodLimit(2, STATUS_OBJECT), _words, NOW)
    assert isinstance(held, Hold)
    assert held.status is None
    assert held.event is not None
    assert held.event.reason == "TooLarge"


def test_the_two_kinds_keep_the_words_users_read() -> None:
    assert (STATUS_OBJECT.reason, STATUS_OBJECT.event_reason) == ("TooLarge", "TooLarge")
    assert (MACHINE.reason, MACHINE.event_reason) == ("Unschedulable", "FailedScheduling")


# ---- counting ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job", "replicas", "largest", "now"),
    [
        (BIG, None, 3, 3),
        (ELASTIC, None, 3, 1),
        (ELASTIC, {"worker": 2}, 3, 2),
        (_job(launcher={"replicas": 1}, worker={"replicas": 4, "maxReplicas": 64}), None, 65, 5),
        (_job(worker={"replicas": 0}), None, 0, 0),
    ],
)
def test_each_kind_counts_its_way(
    job: TrainingJob, replicas: dict[str, int] | None, largest: int, now: int
) -> None:
    assert count(job, STATUS_OBJECT, replicas) == largest
    assert count(job, MACHINE, replicas) == now


def test_an_oversize_has_the_facts_the_words_need() -> None:
    job = _job(launcher={"replicas": 1}, worker={"replicas": 2, "minReplicas": 1, "maxReplicas": 9})
    assert oversize(job, PodLimit(5, STATUS_OBJECT)) == Oversize(
        "big", 5, (("launcher", 1), ("worker", 9)), True
    )
    assert oversize(job, PodLimit(2, MACHINE)) == Oversize("big", 2, (("launcher", 1), ("worker", 2)), False)
    assert oversize(job, PodLimit(3, MACHINE)) is None


@given(
    counts=st.lists(st.integers(0, 50), min_size=1, max_size=4),
    limit=st.integers(1, 120),
    kind=st.sampled_from([STATUS_OBJECT, MACHINE]),
    started=st.booleans(),
)
def test_held_exactly_past_the_limit_and_a_started_job_only_where_the_kind_says(
    counts: list[int], limit: int, kind: LimitKind, started: bool
) -> None:
    job = _job(**{f"r{i}": {"replicas": pods} for i, pods in enumerate(counts)})
    status = STARTED if started else JobStatus()
    decision = admit(job, status, PodLimit(limit, kind), _words, NOW)
    past = sum(counts) > limit
    assert isinstance(decision, Hold) == (past and (kind.holds_started or not started))
    if isinstance(decision, Hold):
        assert (decision.status is None) == started
        assert decision.event is not None
        assert decision.event.key == f"u1/held/{sum(counts)}"
