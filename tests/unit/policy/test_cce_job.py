"""CCE's AITrainingJob example (a Horovod launcher and elastic trainers) under every fault its rules name."""

from __future__ import annotations

import pytest

from tests.unit.policy.jobs import cce_job, event, exited, first_decision, run
from trainguard.api import RestartScope, TrainingJob
from trainguard.policy import (
    FaultKind,
    Outcome,
    PodRef,
    PolicyState,
    Remedy,
    apply_decision,
    decide,
    decide_success,
    outcome,
)

LAUNCHER = PodRef("launcher", 0)


@pytest.fixture(scope="module")
def cce() -> TrainingJob:
    return cce_job()


def test_launcher_exit_129_restarts_that_pod(cce: TrainingJob) -> None:
    decision = first_decision(cce, exited(LAUNCHER, 129))
    assert (decision.action, decision.scope, decision.rule, decision.counted) == (
        Remedy.RESTART,
        RestartScope.POD,
        "faultTolerantPolicy[0]",
        True,
    )
    assert decision.pods == (LAUNCHER,)
    assert "restart 1 of restartLimit 100 within 864000 s" in decision.reason


def test_launcher_exit_101_is_listed_too(cce: TrainingJob) -> None:
    assert first_decision(cce, exited(LAUNCHER, 101)).action is Remedy.RESTART


def test_launcher_exit_1_fails_the_job(cce: TrainingJob) -> None:
    decision = first_decision(cce, exited(LAUNCHER, 1))
    assert (decision.action, decision.rule, decision.permanent) == (Remedy.FAIL_JOB, "restartPolicy", True)
    assert "failPolicy Any" in decision.reason
    state = apply_decision(PolicyState(), decision, 0.0)
    assert outcome(cce, state).result is Outcome.FAILED


@pytest.mark.parametrize("kind", [FaultKind.NODE_NOT_READY, FaultKind.POD_FORCE_DELETED])
def test_trainer_node_lost_or_force_deleted_is_replaced(cce: TrainingJob, kind: FaultKind) -> None:
    trainer = PodRef("trainer", 1)
    decision = first_decision(cce, event(kind, trainer))
    assert (decision.action, decision.scope, decision.rule, decision.pods) == (
        Remedy.RESTART,
        RestartScope.POD,
        "faultTolerantPolicy[0]",
        (trainer,),
    )
    assert decision.replace_node is (kind is FaultKind.NODE_NOT_READY)


def test_launcher_node_lost_is_replaced_by_its_second_entry(cce: TrainingJob) -> None:
    decision = first_decision(cce, event(FaultKind.NODE_NOT_READY, LAUNCHER))
    assert (decision.action, decision.rule) == (Remedy.RESTART, "faultTolerantPolicy[1]")


def test_launcher_success_ends_the_job_while_trainers_run(cce: TrainingJob) -> None:
    decision = decide_success(cce, PolicyState(), LAUNCHER, at=10.0, now=10.0)
    assert (decision.action, decision.permanent) == (Remedy.NONE, False)
    state = apply_decision(PolicyState(), decision, 10.0)
    result = outcome(cce, state)
    assert result.result is Outcome.SUCCEEDED
    assert result.succeeded_roles == frozenset({"launcher"})
    assert "launcher" in result.reason


def test_trainer_code_errors_shrink_it_to_min_then_the_job_fails(cce: TrainingJob) -> None:
    # trainer: OnNodeFailWithExitCode does not retry 1; failPolicy None tolerates it; minReplicas 1 of 3.
    state = PolicyState()
    actions = []
    for index, alive_others in ((2, 2), (1, 1), (0, 0)):
        decision = decide(cce, state, exited(PodRef("trainer", index), 1), 0.0, {"trainer": alive_others})
        state = apply_decision(state, decision, 0.0)
        actions.append(decision.action)
    assert actions == [Remedy.SHRINK, Remedy.SHRINK, Remedy.FAIL_JOB]
    assert state.job_failure is not None
    assert "fewer than its minReplicas 1" in state.job_failure
    assert outcome(cce, state).result is Outcome.FAILED


def test_trainer_restart_limit(cce: TrainingJob) -> None:
    trainer = PodRef("trainer", 0)
    faults = [event(FaultKind.POD_FORCE_DELETED, trainer, float(t)) for t in range(101)]
    decisions, state = run(cce, faults)
    assert [d.action for d in decisions[:100]] == [Remedy.RESTART] * 100
    assert (decisions[100].action, decisions[100].limit) == (Remedy.SHRINK, "restartLimit")
    assert state.role_restarts["trainer"] == 100
