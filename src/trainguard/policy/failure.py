"""What a permanent failure of a pod means for its role and the job (docs/policy.md §4, Limits and backoff,
its last paragraph, and §6, Elastic roles, success and failure).

The pod is not restarted. If the role's failPolicy tolerates it: an elastic role shrinks (keeps going
without the pod) while the pods still alive are at least minReplicas, below that the role fails; a fixed-size
role keeps going with the pod failed (action none). If the role fails, the job's failPolicy over its roles
says whether the job fails (fail-job) or goes on without the role (fail-role).
"""

from __future__ import annotations

from collections.abc import Mapping

from trainguard.api.model import ReplicaSpec, TrainingJob
from trainguard.policy.outcome import job_failure, role_failure
from trainguard.policy.roles import resolve_role
from trainguard.policy.types import Decision, Fault, PodRef, Remedy


def fail_pod(
    job: TrainingJob,
    failed_pods: frozenset[PodRef],
    failed_roles: Mapping[str, str],
    fault: Fault,
    alive: Mapping[str, int] | None,
    why: str,
    rule: str,
    limit: str | None = None,
    slots: Mapping[str, int] | None = None,
) -> Decision:
    """The decision for a pod that failed for good; ``why`` says how it came to that. ``slots``: role -> its
    pod slots now, which its failPolicy is judged over (``decide`` says more)."""
    if fault.pod is None:
        raise ValueError("only a pod can fail for good")
    pod = fault.pod
    role, spec = resolve_role(job, pod.role)
    failed = failed_pods | {pod}

    def decision(action: Remedy, reason: str) -> Decision:
        return Decision(fault, action, None, rule, False, reason, pods=(pod,), permanent=True, limit=limit)

    gone = f"{why}; {pod} has failed for good"
    role_why = role_failure(role, spec, failed, _of_role(job, role, slots))
    if role_why is None and spec.is_elastic and job.spec.fault_tolerant:
        remaining = _alive_after(job, role, spec, failed, alive)
        if remaining >= spec.min_count:
            return decision(
                Remedy.SHRINK,
                f"{gone}; role {role} tolerates it (failPolicy {spec.fail_policy.value}) and shrinks to "
                f"{remaining} pods (minReplicas {spec.min_count}) instead of replacing it",
            )
        role_why = (
            f"role {role} fails: it would keep {remaining} pods, fewer than its minReplicas {spec.min_count}"
        )
    if role_why is None:
        return decision(
            Remedy.NONE,
            f"{gone}; role {role} tolerates it (failPolicy {spec.fail_policy.value}) and goes on without it",
        )
    job_why = job_failure(job, {*failed_roles, role})
    if job_why is not None:
        return decision(Remedy.FAIL_JOB, f"{gone}; {role_why}; {job_why}")
    return decision(
        Remedy.FAIL_ROLE,
        f"{gone}; {role_why}; the job goes on (failPolicy {job.spec.fail_policy.value})",
    )


def _alive_after(
    job: TrainingJob, role: str, spec: ReplicaSpec, failed: frozenset[PodRef], alive: Mapping[str, int] | None
) -> int:
    """Pods of the role alive besides the failed one: from ``alive`` when given, else slots not failed."""
    count = _of_role(job, role, alive)
    if count is not None:
        return max(count, 0)
    return spec.replicas - sum(1 for ref in failed if ref.role == role and ref.index < spec.replicas)


def _of_role(job: TrainingJob, role: str, counts: Mapping[str, int] | None) -> int | None:
    """The count of ``role`` in a mapping keyed by role names as callers spell them (aliases resolved)."""
    return next((n for key, n in (counts or {}).items() if resolve_role(job, key)[0] == role), None)
