"""Every restart policy x every fault kind x every scope, with no faultTolerantPolicy entry
(docs/policy.md §2)."""

from __future__ import annotations

import pytest

from tests.unit.policy.jobs import event, exited, first_decision, job, role
from trainguard.api import RestartPolicy, RestartScope, TrainingJob
from trainguard.policy import Fault, FaultKind, PodRef, Remedy

POD = PodRef("worker", 1)

FAULTS: dict[str, Fault] = {
    "exit 1": exited(POD, 1),
    "exit 137": exited(POD, 137),
    "exit 0": exited(POD, 0),
    "OOMKilled": event(FaultKind.OOM_KILLED, POD),
    "nodeNotReady": event(FaultKind.NODE_NOT_READY, POD),
    "PodForceDeleted": event(FaultKind.POD_FORCE_DELETED, POD),
    "PodEvicted": event(FaultKind.POD_EVICTED, POD),
    "Hang (hang handling off)": event(FaultKind.HANG, POD),
    "StartTimeout": event(FaultKind.START_TIMEOUT, POD),
}

# R: restart; F: the pod fails for good; D: done (a pod that succeeded).
TABLE: dict[RestartPolicy, str] = {
    #                                   exit1 137 0 OOM NNR FD EV hang ST
    RestartPolicy.NEVER: "F F D F F F F F R",
    RestartPolicy.ON_FAILURE: "R R D R R R R R R",
    RestartPolicy.ALWAYS: "R R R R R R R R R",
    RestartPolicy.EXIT_CODE: "F R D R F F F F R",
    RestartPolicy.ON_NODE_FAIL: "F F D F R R R R R",
    RestartPolicy.ON_NODE_FAIL_WITH_EXIT_CODE: "F R D R R R R R R",
}

CASES = [
    (policy, name, outcome)
    for policy, row in TABLE.items()
    for name, outcome in zip(FAULTS, row.split(), strict=True)
]


def _job(policy: RestartPolicy, scope: RestartScope) -> TrainingJob:
    return job(
        {
            "master": role(1),
            "worker": role(3, restartPolicy=policy.value, restartScope=scope.value, restartLimit=5),
        }
    )


@pytest.mark.parametrize("scope", list(RestartScope), ids=lambda s: s.value)
@pytest.mark.parametrize(("policy", "fault_name", "expected"), CASES, ids=lambda v: getattr(v, "value", v))
def test_policy_decides(policy: RestartPolicy, fault_name: str, expected: str, scope: RestartScope) -> None:
    training_job = _job(policy, scope)
    fault = FAULTS[fault_name]
    decision = first_decision(training_job, fault)

    if expected == "R":
        assert decision.action is Remedy.RESTART, decision.reason
        start_timeout = fault.kind is FaultKind.START_TIMEOUT
        assert decision.rule == ("restartTimeLimit" if start_timeout else "restartPolicy")
        want_scope = RestartScope.POD if start_timeout else scope
        assert decision.scope is want_scope
        assert (
            decision.pods
            == {
                RestartScope.POD: (POD,),
                RestartScope.REPLICA: (PodRef("worker", 0), POD, PodRef("worker", 2)),
                RestartScope.ALL: (PodRef("master", 0), PodRef("worker", 0), POD, PodRef("worker", 2)),
            }[want_scope]
        )
        assert decision.counted is (fault.kind is not FaultKind.POD_EVICTED)
        assert not decision.permanent
    elif expected == "F":
        # worker failPolicy Any fails the role; the job's failPolicy Any fails the job.
        assert decision.action is Remedy.FAIL_JOB, decision.reason
        assert decision.permanent
        assert decision.scope is None
        assert not decision.counted
        assert decision.rule == "restartPolicy"
        assert "has failed for good" in decision.reason
    else:
        assert decision.action is Remedy.NONE, decision.reason
        assert not decision.permanent
        assert not decision.counted
    assert decision.reason.startswith(str(POD)) or decision.reason.startswith("the node of")


def test_exceptional_events_move_the_pod_off_its_node() -> None:
    training_job = _job(RestartPolicy.ON_FAILURE, RestartScope.POD)
    moved = {name for name, fault in FAULTS.items() if first_decision(training_job, fault).replace_node}
    assert moved == {"nodeNotReady", "PodEvicted", "StartTimeout"}
