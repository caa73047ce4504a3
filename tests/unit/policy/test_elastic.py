"""Elastic roles: shrink at min, fail below it, grow back toward the desired size, bounds
(docs/policy.md §6)."""

from __future__ import annotations

import pytest

from tests.unit.policy.jobs import exited, job, role
from trainguard.api import TrainingJob
from trainguard.policy import (
    PodRef,
    PolicyState,
    Remedy,
    apply_decision,
    decide,
    pods_to_add,
    record_grown,
    validate_scale,
)


def _job(fail_policy: str = "None", job_fail_policy: str = "Any") -> TrainingJob:
    return job(
        {
            "launcher": role(1),
            "trainer": role(3, minReplicas=2, maxReplicas=5, restartPolicy="Never", failPolicy=fail_policy),
        },
        failPolicy=job_fail_policy,
    )


@pytest.mark.parametrize(
    ("live_others", "action"),
    [(4, Remedy.SHRINK), (2, Remedy.SHRINK), (1, Remedy.FAIL_JOB), (0, Remedy.FAIL_JOB)],
)
def test_shrink_while_min_replicas_holds(live_others: int, action: Remedy) -> None:
    decision = decide(_job(), PolicyState(), exited(PodRef("trainer", 2), 1), 0.0, {"trainer": live_others})
    assert decision.action is action, decision.reason
    assert decision.permanent
    assert decision.pods == (PodRef("trainer", 2),)
    if action is Remedy.SHRINK:
        assert f"shrinks to {live_others} pods (minReplicas 2)" in decision.reason
    else:
        assert "fewer than its minReplicas 2" in decision.reason


def test_below_min_fails_only_the_role_when_the_job_tolerates_it() -> None:
    training_job = _job(job_fail_policy="Rank0")
    decision = decide(training_job, PolicyState(), exited(PodRef("trainer", 0), 1), 0.0, {"trainer": 1})
    assert decision.action is Remedy.FAIL_ROLE
    state = apply_decision(PolicyState(), decision, 0.0)
    assert set(state.failed_roles) == {"trainer"}
    assert state.job_failure is None


def test_without_live_counts_the_failed_slots_are_subtracted() -> None:
    training_job = _job()
    state = PolicyState(failed_pods=frozenset({PodRef("trainer", 0)}))
    decision = decide(training_job, state, exited(PodRef("trainer", 1), 1), 0.0)
    assert decision.action is Remedy.FAIL_JOB  # 3 slots - 2 failed = 1 < minReplicas 2


def test_a_role_whose_fail_policy_does_not_tolerate_fails_instead_of_shrinking() -> None:
    decision = decide(_job("Any"), PolicyState(), exited(PodRef("trainer", 1), 1), 0.0, {"trainer": 4})
    assert decision.action is Remedy.FAIL_JOB


@pytest.mark.parametrize(("index", "action"), [(0, Remedy.FAIL_JOB), (1, Remedy.SHRINK)])
def test_rank0_fail_policy_tolerates_other_pods(index: int, action: Remedy) -> None:
    decision = decide(_job("Rank0"), PolicyState(), exited(PodRef("trainer", index), 1), 0.0, {"trainer": 2})
    assert decision.action is action


def test_restartable_faults_replace_rather_than_shrink() -> None:
    training_job = job({"trainer": role(3, minReplicas=1, maxReplicas=5, restartPolicy="OnFailure")})
    decision = decide(training_job, PolicyState(), exited(PodRef("trainer", 1), 1), 0.0, {"trainer": 2})
    assert decision.action is Remedy.RESTART


@pytest.mark.parametrize(("replicas", "ok"), [(1, False), (2, True), (5, True), (6, False), (0, False)])
def test_validate_scale(replicas: int, ok: bool) -> None:
    if ok:
        validate_scale(_job(), "Trainer", replicas)
    else:
        with pytest.raises(ValueError, match=rf"^replicas {replicas} outside \[2, 5\]$"):
            validate_scale(_job(), "trainer", replicas)


def test_validate_scale_of_the_cce_example_bounds_message() -> None:
    training_job = job({"trainer": role(3, minReplicas=1, maxReplicas=5)})
    with pytest.raises(ValueError, match=r"^replicas 7 outside \[1, 5\]$"):
        validate_scale(training_job, "trainer", 7)
    with pytest.raises(ValueError, match="no role 'ps'; its roles: trainer"):
        validate_scale(training_job, "ps", 1)


def test_a_fixed_role_cannot_scale() -> None:
    with pytest.raises(ValueError, match=r"replicas 2 outside \[1, 1\]"):
        validate_scale(_job(), "launcher", 2)


@pytest.mark.parametrize(
    ("alive", "free", "desired", "added"),
    [
        ({0, 1, 2}, 4, None, ()),  # at the desired size
        ({0, 2}, 4, None, (1,)),  # a shrunk slot comes back
        ({0}, 1, None, (1,)),  # only as many as there is room for
        ({0}, 0, None, ()),
        ({0, 1, 2}, 9, 5, (3, 4)),  # grows to a new desired size
        ({0, 1, 2}, 9, 7, (3, 4)),  # never past maxReplicas
        ({0, 1, 2, 3}, 9, 2, ()),  # shrinking is not growing
    ],
)
def test_pods_to_add(alive: set[int], free: int, desired: int | None, added: tuple[int, ...]) -> None:
    assert pods_to_add(_job(), "trainer", alive, free, desired) == tuple(PodRef("trainer", i) for i in added)


def test_grown_pods_are_no_longer_failed() -> None:
    training_job = _job()
    decision = decide(training_job, PolicyState(), exited(PodRef("trainer", 2), 1), 0.0, {"trainer": 2})
    state = apply_decision(PolicyState(), decision, 0.0)
    assert PodRef("trainer", 2) in state.failed_pods
    back = pods_to_add(training_job, "trainer", {0, 1}, 1)
    state = record_grown(state, back)
    assert state.failed_pods == frozenset()
