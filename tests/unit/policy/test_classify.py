"""Observations become faults once, by the rules of docs/policy.md §1, Faults."""

from __future__ import annotations

import pytest

from tests.unit.policy.jobs import job, role
from trainguard.policy import FaultKind, Observation, PodRef, check_deadline, classify, start_timed_out

POD = PodRef("worker", 0)


@pytest.mark.parametrize(
    ("observation", "kind", "code"),
    [
        (Observation(POD, 1.0, "Failed", exit_code=1), FaultKind.EXITED, 1),
        (Observation(POD, 1.0, "Failed", exit_code=129), FaultKind.EXITED, 129),
        (Observation(POD, 1.0, "Failed", signal=9), FaultKind.EXITED, 137),
        (Observation(POD, 1.0, "Failed", signal=15), FaultKind.EXITED, 143),
        (Observation(POD, 1.0, "Failed"), FaultKind.EXITED, None),
        (Observation(POD, 1.0, "Failed", exit_code=137, reason="OOMKilled"), FaultKind.OOM_KILLED, 137),
        (Observation(POD, 1.0, "Failed", reason="OOMKilled"), FaultKind.OOM_KILLED, 137),
        (Observation(POD, 1.0, "Running", node="n1", node_ready=False), FaultKind.NODE_NOT_READY, None),
        (Observation(POD, 1.0, "Unknown", node="n1"), FaultKind.NODE_NOT_READY, None),
        (Observation(POD, 1.0, "Deleted"), FaultKind.POD_FORCE_DELETED, None),
        (Observation(POD, 1.0, "Failed", reason="Evicted"), FaultKind.POD_EVICTED, None),
        (Observation(POD, 1.0, "Failed", reason="Preempted"), FaultKind.POD_EVICTED, None),
        (Observation(POD, 1.0, "Running", reason="DisruptionTarget"), FaultKind.POD_EVICTED, None),
        (Observation(POD, 1.0, "Running", reason="Hang"), FaultKind.HANG, None),
        (Observation(POD, 1.0, "Pending", reason="StartTimeout"), FaultKind.START_TIMEOUT, None),
    ],
)
def test_faults(observation: Observation, kind: FaultKind, code: int | None) -> None:
    fault = classify(observation)
    assert fault is not None
    assert (fault.kind, fault.exit_code, fault.pod, fault.at) == (kind, code, POD, 1.0)


@pytest.mark.parametrize(
    "observation",
    [
        Observation(POD, 1.0, "Running", node="n1"),
        Observation(POD, 1.0, "Pending"),
        Observation(POD, 1.0, "Succeeded", exit_code=0),
        Observation(POD, 1.0, "Succeeded", node="n1", node_ready=False),
        Observation(POD, 1.0, "Deleted", deleted_by_us=True),
        Observation(POD, 1.0, "Failed", exit_code=137, deleted_by_us=True),
    ],
)
def test_not_faults(observation: Observation) -> None:
    assert classify(observation) is None


def test_eviction_wins_over_the_failed_phase_it_shows() -> None:
    fault = classify(Observation(POD, 1.0, "Failed", exit_code=137, reason="Evicted", node_ready=False))
    assert fault is not None
    assert fault.kind is FaultKind.POD_EVICTED


def test_start_timeout_fires_at_the_limit() -> None:
    training_job = job({"worker": role(restartTimeLimit=60)})
    assert start_timed_out(training_job, POD, restarted_at=100.0, now=159.9) is None
    fault = start_timed_out(training_job, PodRef("Worker", 0), restarted_at=100.0, now=160.0)
    assert fault is not None
    assert (fault.kind, fault.pod, fault.at) == (FaultKind.START_TIMEOUT, POD, 160.0)


def test_no_start_timeout_without_a_limit() -> None:
    assert start_timed_out(job(), POD, restarted_at=0.0, now=1e9) is None


def test_deadline_fires_at_the_time_limit() -> None:
    training_job = job(timeLimit=3600)
    assert check_deadline(training_job, started_at=10.0, now=3609.0) is None
    fault = check_deadline(training_job, started_at=10.0, now=3610.0)
    assert fault is not None
    assert (fault.kind, fault.pod) == (FaultKind.DEADLINE, None)
    assert check_deadline(job(), started_at=0.0, now=1e9) is None
