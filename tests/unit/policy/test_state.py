"""How decisions move the counters, and that the counters survive serialization."""

from __future__ import annotations

import json

import pytest

from tests.unit.policy.jobs import event, exited, job, role, run
from trainguard.policy import (
    Fault,
    FaultKind,
    PodCounters,
    PodRef,
    PolicyState,
    Remedy,
    apply_decision,
    check_deadline,
    decide,
    record_progress,
    record_running,
)

POD = PodRef("worker", 0)


def test_a_restart_updates_the_counters() -> None:
    training_job = job({"worker": role(2, restartPolicy="OnFailure", restartLimit=5, restartTimeout=100)})
    decisions, state = run(training_job, [exited(POD, 1, 7.0)])
    assert state.pod(POD) == PodCounters(restarts=1, backoff_streak=1, last_restart_at=7.0)
    assert state.pod(PodRef("worker", 1)) == PodCounters()
    assert (state.job_restarts, state.role_restarts, state.counted_restarts) == (
        1,
        {"worker": 1},
        {"worker": (7.0,)},
    )
    assert decisions[0].window_start == 7.0 - 100


def test_an_all_restart_counts_once_per_role_and_clears_ends() -> None:
    training_job = job(
        {"master": role(1), "worker": role(2, restartPolicy="OnFailure", restartScope="All")},
        failPolicy="None",
    )
    start = PolicyState(
        succeeded_pods=frozenset({PodRef("master", 0)}),
        failed_pods=frozenset({PodRef("worker", 1)}),
        failed_roles={"worker": "earlier"},
    )
    _, state = run(training_job, [exited(POD, 1, 1.0)], start)
    assert state.role_restarts == {"master": 1, "worker": 1}
    assert (state.succeeded_pods, state.failed_pods, dict(state.failed_roles)) == (
        frozenset(),
        frozenset(),
        {},
    )
    assert state.counted_restarts == {"worker": (1.0,)}


def test_a_pod_restart_keeps_the_role_failed_mark() -> None:
    training_job = job({"worker": role(2, restartPolicy="OnFailure")}, failPolicy="None")
    _, state = run(training_job, [exited(POD, 1, 1.0)], PolicyState(failed_roles={"worker": "earlier"}))
    assert dict(state.failed_roles) == {"worker": "earlier"}


def test_a_deadline_records_a_timeout() -> None:
    training_job = job(timeLimit=10)
    fault = check_deadline(training_job, 0.0, 10.0)
    assert fault is not None
    decision = decide(training_job, PolicyState(), fault, 10.0)
    assert (decision.action, decision.rule, decision.scope, decision.pods) == (
        Remedy.FAIL_JOB,
        "timeLimit",
        None,
        (),
    )
    state = apply_decision(PolicyState(), decision, 10.0)
    assert state.timed_out
    assert state.job_failure == decision.reason


def test_a_pod_fault_needs_its_pod() -> None:
    with pytest.raises(ValueError, match="needs the pod"):
        decide(job(), PolicyState(), Fault(FaultKind.EXITED, None, 0.0, exit_code=1), 0.0)


def test_progress_and_running() -> None:
    state = PolicyState(pods={POD: PodCounters(consecutive_hangs=2)})
    state = record_progress(state, POD, 5.0)
    assert state.pod(POD) == PodCounters(consecutive_hangs=0, running_since=5.0)
    assert record_progress(state, POD, 9.0) is state  # nothing changes: the same state
    assert record_running(PolicyState(), POD, 3.0).pod(POD).running_since == 3.0


def test_round_trip_through_json() -> None:
    training_job = job(
        {"worker": role(3, restartPolicy="OnFailure", restartScope="Replica", restartLimit=9)},
        hang={"timeoutSeconds": 5},
    )
    faults = [exited(POD, 1, 1.5), event(FaultKind.HANG, PodRef("worker", 2), 2.0), exited(POD, 0, 3.0)]
    _, state = run(training_job, faults)
    state = record_running(state, PodRef("worker", 1), 4.25)
    state = state.with_failed_role("worker", "because")
    restored = PolicyState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert restored == state
    assert PolicyState.from_dict({}) == PolicyState()


def test_from_dict_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a saved policy state"):
        PolicyState.from_dict({"pods": [{"index": 1}]})
