"""What-if questions about a job's policy, answered without running it (``trainguard explain``)."""

from __future__ import annotations

from typing import Any

from trainguard.api.model import TrainingJob
from trainguard.policy.decide import decide
from trainguard.policy.faultcheck import CHECK_FAULTS, decide_check_fault, enabled
from trainguard.policy.roles import resolve_role
from trainguard.policy.types import (
    RULE_RESTART_POLICY,
    Decision,
    Fault,
    FaultKind,
    PodCounters,
    PodRef,
    PolicyState,
)

#: An arbitrary "now": every earlier restart is placed at this moment, inside any window.
_NOW = 0.0


def what_if(
    job: TrainingJob,
    pod: PodRef,
    kind: FaultKind,
    exit_code: int | None = None,
    restarts: int = 0,
    hangs: int = 0,
) -> Decision:
    """The decision for a fault of ``pod`` while every other pod is healthy.

    ``restarts`` counted restarts of the pod's role are already spent, inside its window; they count toward
    the job's backoffLimit and job retries too. ``hangs`` hang restarts in place of the pod came just before.
    """
    role, _ = resolve_role(job, pod.role)
    pod = PodRef(role, pod.index)
    alive = {name: spec.replicas for name, spec in job.spec.replica_specs.items()}
    alive[role] = max(alive[role] - 1, 0) if pod.index < alive[role] else alive[role]
    state = PolicyState(
        counted_restarts={role: (_NOW,) * restarts},
        role_restarts={role: restarts},
        job_restarts=restarts,
        job_retries=restarts,
        pods={pod: PodCounters(restarts=restarts, consecutive_hangs=hangs)},
    )
    if kind is FaultKind.OOM_KILLED and exit_code is None:
        exit_code = 137
    fault = Fault(kind, pod, _NOW, exit_code=exit_code)
    if kind in CHECK_FAULTS and enabled(job):  # the fault tolerance check's own rule, as the engine decides
        return decide_check_fault(job, fault, "pre" if kind is FaultKind.PRE_CHECK_FAILED else "periodic", 0)
    return decide(job, state, fault, _NOW, alive)


def rule_text(job: TrainingJob, decision: Decision) -> str:
    """The rule that decided, with the role's restartPolicy named when that is what decided."""
    pod = decision.fault.pod
    if decision.rule != RULE_RESTART_POLICY or pod is None:
        return decision.rule
    return f"{decision.rule} ({resolve_role(job, pod.role)[1].restart_policy.value})"


def decision_fields(job: TrainingJob, decision: Decision) -> dict[str, Any]:
    """A decision as data: what ``trainguard explain -o json`` prints and the job page shows."""
    return {
        "action": decision.action.value,
        "scope": decision.scope.value if decision.scope is not None else None,
        "rule": decision.rule,
        "rule_text": rule_text(job, decision),
        "counted": decision.counted,
        "backoff_s": decision.delay_seconds,
        "another_node": decision.replace_node,
        "limit": decision.limit,
        "reason": decision.reason,
    }
