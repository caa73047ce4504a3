"""completePolicy and failPolicy of roles and of the job (docs/policy.md §6)."""

from __future__ import annotations

import pytest

from tests.unit.policy.jobs import job, role
from trainguard.api import TrainingJob
from trainguard.policy import Outcome, PodRef, PolicyState, outcome


def _pods(spec: str) -> frozenset[PodRef]:
    """ "w0 w2 m0" -> worker-0, worker-2, master-0."""
    names = {"w": "worker", "m": "master"}
    return frozenset(PodRef(names[item[0]], int(item[1:])) for item in spec.split())


def _job(role_policy: str, *, complete: bool) -> TrainingJob:
    field = "completePolicy" if complete else "failPolicy"
    return job({"worker": role(3, **{field: role_policy})}, completePolicy="Any", failPolicy="Any")


@pytest.mark.parametrize(
    ("policy", "succeeded", "failed", "done"),
    [
        ("Any", "w1", "", True),
        ("Any", "", "w0", False),
        ("All", "w0 w1", "", False),
        ("All", "w0 w1 w2", "", True),
        ("All", "w0 w1", "w2", True),  # a pod failed for good (tolerated) does not hold the role up
        ("All", "", "w0 w1 w2", False),
        ("Rank0", "w1 w2", "", False),
        ("Rank0", "w0", "", True),
        ("None", "w0 w1 w2", "", False),
    ],
)
def test_role_complete_policy(policy: str, succeeded: str, failed: str, done: bool) -> None:
    training_job = job({"worker": role(3, completePolicy=policy, failPolicy="None")}, completePolicy="Any")
    state = PolicyState(succeeded_pods=_pods(succeeded), failed_pods=_pods(failed))
    result = outcome(training_job, state)
    assert (result.result is Outcome.SUCCEEDED) is done
    assert ("worker" in result.succeeded_roles) is done


@pytest.mark.parametrize(
    ("policy", "failed", "fails"),
    [
        ("Any", "", False),
        ("Any", "w2", True),
        ("All", "w0 w1", False),
        ("All", "w0 w1 w2", True),
        ("Rank0", "w1 w2", False),
        ("Rank0", "w0", True),
        ("None", "w0 w1 w2", False),
    ],
)
def test_role_fail_policy(policy: str, failed: str, fails: bool) -> None:
    result = outcome(_job(policy, complete=False), PolicyState(failed_pods=_pods(failed)))
    assert (result.result is Outcome.FAILED) is fails
    assert ("worker" in result.failed_roles) is fails
    if fails:
        assert "worker" in result.reason


def test_replicas_given_count_the_slots() -> None:
    training_job = job({"worker": role(3, completePolicy="All")})
    state = PolicyState(succeeded_pods=_pods("w0 w1"))
    assert outcome(training_job, state).result is None
    assert outcome(training_job, state, {"Worker": 2}).result is Outcome.SUCCEEDED


def _two_roles(job_policy: str, *, complete: bool) -> TrainingJob:
    end = "completePolicy" if complete else "failPolicy"
    return job(
        {"master": role(1, replicaType="master"), "worker": role(2, completePolicy="Any")},
        **{end: job_policy},
    )


@pytest.mark.parametrize(
    ("policy", "succeeded", "done"),
    [
        ("Any", "w0", True),
        ("Any", "", False),
        ("All", "w0", False),
        ("All", "w0 m0", True),
        ("Rank0", "w0 w1", False),
        ("Rank0", "m0", True),
        ("None", "m0 w0 w1", False),
    ],
)
def test_job_complete_policy(policy: str, succeeded: str, done: bool) -> None:
    result = outcome(_two_roles(policy, complete=True), PolicyState(succeeded_pods=_pods(succeeded)))
    assert (result.result is Outcome.SUCCEEDED) is done


@pytest.mark.parametrize(
    ("policy", "failed", "fails"),
    [
        ("Any", "w1", True),
        ("All", "w1", False),
        ("All", "w1 m0", True),
        ("Rank0", "w0", False),
        ("Rank0", "m0", True),
        ("None", "w0", False),
        ("None", "w0 m0", True),  # nothing is left to run
    ],
)
def test_job_fail_policy(policy: str, failed: str, fails: bool) -> None:
    result = outcome(_two_roles(policy, complete=False), PolicyState(failed_pods=_pods(failed)))
    assert (result.result is Outcome.FAILED) is fails


def test_rank0_is_the_first_role_without_a_master() -> None:
    training_job = job({"a": role(1), "b": role(1)}, completePolicy="Rank0")
    assert outcome(training_job, PolicyState(succeeded_pods=frozenset({PodRef("b", 0)}))).result is None
    assert outcome(training_job, PolicyState(succeeded_pods=frozenset({PodRef("a", 0)}))).finished


def test_failure_wins_over_success() -> None:
    training_job = _two_roles("Any", complete=False)
    state = PolicyState(succeeded_pods=_pods("m0"), failed_pods=_pods("w0"))
    assert outcome(training_job, state).result is Outcome.FAILED


def test_recorded_failures_and_timeouts() -> None:
    training_job = _two_roles("Any", complete=False)
    assert outcome(training_job, PolicyState(job_failure="backoffLimit")).result is Outcome.FAILED
    timed_out = outcome(training_job, PolicyState(job_failure="ran too long", timed_out=True))
    assert (timed_out.result, timed_out.reason) == (Outcome.TIMEOUT, "ran too long")
    failed_role = outcome(training_job, PolicyState(failed_roles={"worker": "below minReplicas"}))
    assert failed_role.result is Outcome.FAILED
    assert "below minReplicas" in failed_role.reason


def test_a_fresh_job_runs() -> None:
    result = outcome(_two_roles("Any", complete=True), PolicyState())
    assert (result.result, result.finished, result.reason) == (None, False, "running")
