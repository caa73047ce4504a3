"""Elastic roles: shrink at min, fail below it, grow back toward the desired size, bounds
(docs/policy.md §6)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.policy.jobs import exited, job, role
from trainguard.api import TrainingJob
from trainguard.policy import (
    Outcome,
    PodRef,
    PolicyState,
    Remedy,
    apply_decision,
    decide,
    outcome,
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


@pytest.mark.parametrize(
    ("fail_policy", "slots", "action"),
    [
        (
            "Any",
            {"trainer": 5},
            Remedy.FAIL_JOB,
        ),  # a slot of the scaled-out role: failPolicy Any holds for it too
        ("Any", None, Remedy.SHRINK),  # judged over replicas 3 only, slot 3 is not among them
        ("None", {"trainer": 5}, Remedy.SHRINK),
        ("Rank0", {"trainer": 5}, Remedy.SHRINK),
    ],
)
def test_a_scaled_out_slot_is_judged_by_the_fail_policy_over_the_slots_now(
    fail_policy: str, slots: dict[str, int] | None, action: Remedy
) -> None:
    """A pod a scale-out added (index >= replicas) that fails for good: the role's failPolicy is judged over
    the slots the role has now, as the job's outcome is."""
    fault = exited(PodRef("trainer", 3), 1)
    decision = decide(_job(fail_policy), PolicyState(), fault, 0.0, {"trainer": 4}, slots)
    assert decision.action is action, decision.reason


@given(
    fail_policy=st.sampled_from(["Any", "All", "Rank0", "None"]),
    slots=st.integers(min_value=1, max_value=5),
    index=st.integers(min_value=0, max_value=4),
    failed_before=st.frozensets(st.integers(min_value=0, max_value=4), max_size=3),
    live=st.integers(min_value=0, max_value=4),
)
def test_a_pod_failed_for_good_is_tolerated_exactly_when_the_outcome_does_not_fail_its_role(
    fail_policy: str, slots: int, index: int, failed_before: frozenset[int], live: int
) -> None:
    """decide() and outcome() agree: a tolerated failure (shrink, none) leaves the role standing in the job's
    outcome over the same slots; a failure that fails the job makes the outcome Failed."""
    index = index % slots
    training_job = _job(fail_policy, job_fail_policy="Any")
    failed = frozenset(PodRef("trainer", i) for i in failed_before if i < slots and i != index)
    state = PolicyState(failed_pods=failed)
    counts = {"launcher": 1, "trainer": slots}
    if outcome(training_job, state, counts).result is not None:
        return  # the job has ended already
    decision = decide(
        training_job, state, exited(PodRef("trainer", index), 1), 0.0, {"trainer": live}, counts
    )
    after = outcome(training_job, apply_decision(state, decision, 0.0), counts)
    if decision.action in (Remedy.SHRINK, Remedy.NONE):
        assert after.result is None, (decision.reason, after.reason)
    else:
        assert decision.action is Remedy.FAIL_JOB, decision.reason
        assert after.result is Outcome.FAILED, (decision.reason, after.reason)


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
