"""Seed 000's AITrainingJob (a Horovod launcher and elastic trainers) under every fault the issue names."""

from __future__ import annotations

import pytest

from tests.unit.policy.jobs import event, exited, first_decision, run, seed_000
from trainguard.api import RestartScope, TrainingJob
from trainguard.policy import (
    Action,
    FaultKind,
    Outcome,
    PodRef,
    PolicyState,
    apply_decision,
    decide,
    decide_success,
    outcome,
)

LAUNCHER = PodRef("launcher", 0)


@pytest.fixture(scope="module")
def seed() -> TrainingJob:
    return seed_000()


def test_launcher_exit_129_restarts_that_pod(seed: TrainingJob) -> None:
    decision = first_decision(seed, exited(LAUNCHER, 129))
    assert (decision.action, decision.scope, decision.rule, decision.counted) == (
        Action.RESTART,
        RestartScope.POD,
        "faultTolerantPolicy[0]",
        True,
    )
    assert decision.pods == (LAUNCHER,)
    assert "restart 1 of restartLimit 100 within 864000 s" in decision.reason


def test_launcher_exit_101_is_listed_too(seed: TrainingJob) -> None:
    assert first_decision(seed, exited(LAUNCHER, 101)).action is Action.RESTART


def test_launcher_exit_1_fails_the_job(seed: TrainingJob) -> None:
    decision = first_decision(seed, exited(LAUNCHER, 1))
    assert (decision.action, decision.rule, decision.permanent) == (Action.FAIL_JOB, "restartPolicy", True)
    assert "failPolicy Any" in decision.reason
    state = apply_decision(PolicyState(), decision, 0.0)
    assert outcome(seed, state).result is Outcome.FAILED


@pytest.mark.parametrize("kind", [FaultKind.NODE_NOT_READY, FaultKind.POD_FORCE_DELETED])
def test_trainer_node_lost_or_force_deleted_is_replaced(seed: TrainingJob, kind: FaultKind) -> None:
    trainer = PodRef("trainer", 1)
    decision = first_decision(seed, event(kind, trainer))
    assert (decision.action, decision.scope, decision.rule, decision.pods) == (
        Action.RESTART,
        RestartScope.POD,
        "faultTolerantPolicy[0]",
        (trainer,),
    )
    assert decision.replace_node is (kind is FaultKind.NODE_NOT_READY)


def test_launcher_node_lost_is_replaced_by_its_second_entry(seed: TrainingJob) -> None:
    decision = first_decision(seed, event(FaultKind.NODE_NOT_READY, LAUNCHER))
    assert (decision.action, decision.rule) == (Action.RESTART, "faultTolerantPolicy[1]")


def test_launcher_success_ends_the_job_while_trainers_run(seed: TrainingJob) -> None:
    decision = decide_success(seed, PolicyState(), LAUNCHER, at=10.0, now=10.0)
    assert (decision.action, decision.permanent) == (Action.NONE, False)
    state = apply_decision(PolicyState(), decision, 10.0)
    result = outcome(seed, state)
    assert result.result is Outcome.SUCCEEDED
    assert result.succeeded_roles == frozenset({"launcher"})
    assert "launcher" in result.reason


def test_trainer_code_errors_shrink_it_to_min_then_the_job_fails(seed: TrainingJob) -> None:
    # trainer: OnNodeFailWithExitCode does not retry 1; failPolicy None tolerates it; minReplicas 1 of 3.
    state = PolicyState()
    actions = []
    for index, alive_others in ((2, 2), (1, 1), (0, 0)):
        decision = decide(seed, state, exited(PodRef("trainer", index), 1), 0.0, {"trainer": alive_others})
        state = apply_decision(state, decision, 0.0)
        actions.append(decision.action)
    assert actions == [Action.SHRINK, Action.SHRINK, Action.FAIL_JOB]
    assert state.job_failure is not None
    assert "fewer than its minReplicas 1" in state.job_failure
    assert outcome(seed, state).result is Outcome.FAILED


def test_trainer_restart_limit(seed: TrainingJob) -> None:
    trainer = PodRef("trainer", 0)
    faults = [event(FaultKind.POD_FORCE_DELETED, trainer, float(t)) for t in range(101)]
    decisions, state = run(seed, faults)
    assert [d.action for d in decisions[:100]] == [Action.RESTART] * 100
    assert (decisions[100].action, decisions[100].limit) == (Action.SHRINK, "restartLimit")
    assert state.role_restarts["trainer"] == 100
