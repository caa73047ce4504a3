"""faultTolerantPolicy entries: the first match wins and decides alone (docs/policy.md §2)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.jobs import event, exited, first_decision, job, role
from trainguard.api import RestartScope
from trainguard.policy import Fault, FaultKind, PodRef, PolicyState, Remedy, decide

POD = PodRef("worker", 0)


def _with_rules(*rules: dict[str, Any], **fields: Any) -> Any:
    return job({"worker": role(2, faultTolerantPolicy=list(rules), **fields)})


def test_first_matching_entry_wins() -> None:
    training_job = _with_rules(
        {"exitCodes": "1-3,137", "restartPolicy": "ExitCode", "restartScope": "Replica"},
        {"exitCodes": "2", "restartPolicy": "Never"},
        {"exitCodes": "2", "restartPolicy": "ExitCode", "restartScope": "All"},
        restartPolicy="Never",
    )
    decision = first_decision(training_job, exited(POD, 2))
    assert (decision.action, decision.rule, decision.scope) == (
        Remedy.RESTART,
        "faultTolerantPolicy[0]",
        RestartScope.REPLICA,
    )


@pytest.mark.parametrize(
    ("code", "rule", "action"),
    [
        (129, "faultTolerantPolicy[0]", Remedy.RESTART),
        (101, "faultTolerantPolicy[0]", Remedy.RESTART),  # a listed code below 128 is retried too
        (50, "faultTolerantPolicy[1]", Remedy.FAIL_JOB),  # a range entry with Never
        (137, "restartPolicy", Remedy.RESTART),  # no entry: the role's ExitCode retries 128-255
        (1, "faultTolerantPolicy[1]", Remedy.FAIL_JOB),
        (200, "restartPolicy", Remedy.RESTART),
    ],
)
def test_exit_code_entries(code: int, rule: str, action: Remedy) -> None:
    training_job = _with_rules(
        {"exitCodes": "129,101", "restartPolicy": "ExitCode"},
        {"exitCodes": "1-100", "restartPolicy": "Never"},
        restartPolicy="ExitCode",
    )
    decision = first_decision(training_job, exited(POD, code))
    assert (decision.rule, decision.action) == (rule, action), decision.reason


def test_an_entry_without_restart_policy_restarts() -> None:
    training_job = _with_rules({"exitCodes": "7"}, restartPolicy="Never")
    assert first_decision(training_job, exited(POD, 7)).action is Remedy.RESTART


def test_an_oom_kill_matches_137() -> None:
    training_job = _with_rules({"exitCodes": "137", "restartScope": "All"}, restartPolicy="Never")
    decision = first_decision(training_job, event(FaultKind.OOM_KILLED, POD))
    assert (decision.rule, decision.scope) == ("faultTolerantPolicy[0]", RestartScope.ALL)


def test_exit_code_zero_is_success_even_when_listed() -> None:
    training_job = _with_rules({"exitCodes": "0-255", "restartPolicy": "ExitCode"}, restartPolicy="Never")
    decision = first_decision(training_job, exited(POD, 0))
    assert (decision.action, decision.permanent) == (Remedy.NONE, False)


@pytest.mark.parametrize(
    ("kind", "rule", "action"),
    [
        (FaultKind.NODE_NOT_READY, "faultTolerantPolicy[0]", Remedy.RESTART),
        (FaultKind.POD_FORCE_DELETED, "faultTolerantPolicy[0]", Remedy.RESTART),
        (FaultKind.POD_EVICTED, "faultTolerantPolicy[1]", Remedy.FAIL_JOB),
        (FaultKind.HANG, "restartPolicy", Remedy.FAIL_JOB),
    ],
)
def test_event_entries(kind: FaultKind, rule: str, action: Remedy) -> None:
    training_job = _with_rules(
        {"exceptionalEvent": "nodeNotReady,PodForceDeleted", "restartPolicy": "OnNodeFail"},
        {"exceptionalEvent": "PodEvicted", "restartPolicy": "Never"},
        restartPolicy="Never",
    )
    decision = first_decision(training_job, event(kind, POD))
    assert (decision.rule, decision.action) == (rule, action), decision.reason


def test_a_hang_entry_decides_hangs_when_hang_handling_is_off() -> None:
    training_job = _with_rules({"exceptionalEvent": "hang", "restartScope": "All"}, restartPolicy="Never")
    decision = first_decision(training_job, event(FaultKind.HANG, POD))
    assert (decision.action, decision.rule, decision.scope) == (
        Remedy.RESTART,
        "faultTolerantPolicy[0]",
        RestartScope.ALL,
    )
    assert decision.counted


def test_fault_tolerant_false_ignores_the_entries() -> None:
    training_job = job(
        {"worker": role(2, restartPolicy="Never", faultTolerantPolicy=[{"exitCodes": "129"}])},
        faultTolerant=False,
    )
    decision = first_decision(training_job, exited(POD, 129))
    assert (decision.rule, decision.action) == ("faultTolerant", Remedy.FAIL_JOB)  # nor its restartPolicy


def test_the_retryable_set_is_the_jobs() -> None:
    training_job = job({"worker": role(2, restartPolicy="ExitCode")}, retryableExitCodes="1-5,143")
    assert first_decision(training_job, exited(POD, 3)).action is Remedy.RESTART
    assert first_decision(training_job, exited(POD, 143)).action is Remedy.RESTART
    assert first_decision(training_job, exited(POD, 137)).action is Remedy.FAIL_JOB


def test_an_unknown_exit_code_is_a_failure_but_not_retryable() -> None:
    on_failure = job({"worker": role(2, restartPolicy="OnFailure")})
    exit_code = job({"worker": role(2, restartPolicy="ExitCode")})
    unknown = Fault(FaultKind.EXITED, POD, 0.0, exit_code=None)
    assert first_decision(on_failure, unknown).action is Remedy.RESTART
    assert first_decision(exit_code, unknown).action is Remedy.FAIL_JOB


def test_role_names_match_case_insensitively() -> None:
    training_job = job({"Worker": role(2, restartPolicy="OnFailure")})
    decision = first_decision(training_job, exited(PodRef("Worker", 1), 1))
    assert decision.fault.pod == PodRef("Worker", 1)
    lower = decide(training_job, PolicyState(), exited(PodRef("worker", 1), 1), 0.0)
    assert lower.fault.pod == PodRef("Worker", 1)
    assert lower.pods == (PodRef("Worker", 1),)
