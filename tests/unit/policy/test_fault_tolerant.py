"""CCE's ``faultTolerant: false``: "to enable fault tolerance (required for both fault-tolerant tasks and elastic
tasks), check the Fault Tolerance option". Off, no role rule or restart policy recovers a fault, no role shrinks
and no scale is taken; a ModelArts job retry or restart upon suspension, each asked for by its own setting,
still apply (docs/policy.md §9)."""

from __future__ import annotations

import pytest

from tests.unit.policy.jobs import exited, job, role
from trainguard.api import TrainingJob
from trainguard.policy import PodRef, PolicyState, Remedy, decide, validate_scale
from trainguard.policy.elastic import scale_refusal
from trainguard.policy.types import Fault, FaultKind

POD = PodRef("trainer", 1)


def _job(tolerant: bool, **extra: object) -> TrainingJob:
    rules = [{"exitCodes": "137", "restartPolicy": "ExitCode", "restartScope": "Pod"}]
    trainer = role(3, minReplicas=1, maxReplicas=5, restartPolicy="OnFailure", failPolicy="None",
                   faultTolerantPolicy=rules)  # fmt: skip
    return job({"launcher": role(1), "trainer": trainer}, faultTolerant=tolerant, **extra)


@pytest.mark.parametrize(
    ("fault", "tolerant", "action", "rule"),
    [
        (exited(POD, 137), True, Remedy.RESTART, "faultTolerantPolicy[0]"),
        (exited(POD, 1), True, Remedy.RESTART, "restartPolicy"),
        (Fault(FaultKind.NODE_NOT_READY, POD, 0.0), True, Remedy.RESTART, "restartPolicy"),
        # Off: nothing recovers it, and the elastic role does not shrink either: the pod fails for good.
        (exited(POD, 137), False, Remedy.NONE, "faultTolerant"),
        (exited(POD, 1), False, Remedy.NONE, "faultTolerant"),
        (Fault(FaultKind.NODE_NOT_READY, POD, 0.0), False, Remedy.NONE, "faultTolerant"),
    ],
)
def test_off_no_rule_or_restart_policy_recovers_a_fault(
    fault: Fault, tolerant: bool, action: Remedy, rule: str
) -> None:
    decision = decide(_job(tolerant), PolicyState(), fault, 0.0, {"trainer": 2})
    assert (decision.action, decision.rule) == (action, rule), decision.reason
    if not tolerant:
        assert decision.permanent
        assert "spec.faultTolerant is false" in decision.reason


def test_off_a_modelarts_job_retry_still_restarts_the_job() -> None:
    retried = _job(False, jobRetry={"retryNum": 3})
    decision = decide(retried, PolicyState(), exited(POD, 137), 0.0, {"trainer": 2})
    assert decision.action is Remedy.RESTART
    assert decision.rule == "jobRetry"


def test_off_the_job_is_not_elastic() -> None:
    with pytest.raises(ValueError, match=r"set spec\.faultTolerant: true to scale it"):
        validate_scale(_job(False), "trainer", 4)
    assert "not elastic" in (scale_refusal(_job(False), "trainer", 4) or "")
    validate_scale(_job(True), "trainer", 4)
    assert scale_refusal(_job(True), "trainer", 4) is None
