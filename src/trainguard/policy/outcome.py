"""Success and failure of roles and of the job (docs/policy.md §6, Elastic roles, success and failure).

A role, over its pod slots 0..replicas-1:
- failPolicy ``Any``: one permanently failed pod fails it; ``All``: every slot failed; ``Rank0``: slot 0
  failed; ``None``: pod failures never fail it (an elastic role still fails below minReplicas, decided by
  decide() and remembered in the state).
- completePolicy ``Any``: one pod succeeded; ``All``: every slot succeeded or failed for good, and at least
  one succeeded; ``Rank0``: slot 0 succeeded; ``None``: its completion does not count.

The job applies the same words to its roles. The job's "rank 0" role is its master/launcher/chief role, else
its first role. Job completePolicy ``All`` waits for every role whose completion counts (none counting: the
job never succeeds on its own), ``None`` never succeeds on its own (it ends by failure, deadline or delete).
Job failPolicy ``None`` still fails the job once every role has failed, since nothing is left to run.
Failure is checked before success.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from trainguard.api.model import EndPolicy, ReplicaSpec, TrainingJob
from trainguard.policy.roles import rank0_role, resolve_role
from trainguard.policy.types import JobOutcome, Outcome, PodRef, PolicyState


def role_failure(
    role: str, spec: ReplicaSpec, failed: Collection[PodRef], replicas: int | None = None
) -> str | None:
    """Why the role has failed by its failPolicy, given the permanently failed pods; None if it has not."""
    count = spec.replicas if replicas is None else replicas
    mine = {ref.index for ref in failed if ref.role == role and ref.index < count}
    policy = spec.fail_policy
    if policy is EndPolicy.ANY and mine:
        return f"role {role} fails by its failPolicy Any"
    if policy is EndPolicy.ALL and count > 0 and len(mine) == count:
        return f"role {role} fails: all {count} of its pods failed for good (failPolicy All)"
    if policy is EndPolicy.RANK0 and 0 in mine:
        return f"role {role} fails: {role}-0 failed for good (failPolicy Rank0)"
    return None


def role_completed(
    role: str,
    spec: ReplicaSpec,
    succeeded: Collection[PodRef],
    failed: Collection[PodRef],
    replicas: int | None = None,
) -> bool:
    count = spec.replicas if replicas is None else replicas
    done = {ref.index for ref in succeeded if ref.role == role and ref.index < count}
    gone = {ref.index for ref in failed if ref.role == role and ref.index < count}
    policy = spec.complete_policy
    if policy is EndPolicy.ANY:
        return bool(done)
    if policy is EndPolicy.ALL:
        return bool(done) and len(done | gone) >= count
    if policy is EndPolicy.RANK0:
        return 0 in done
    return False


def job_failure(job: TrainingJob, failed_roles: Collection[str]) -> str | None:
    """Why the job fails, by its failPolicy over the failed roles; None if it does not."""
    roles = list(job.spec.replica_specs)
    failed = [role for role in roles if role in failed_roles]
    if not failed:
        return None
    policy = job.spec.fail_policy
    if len(failed) == len(roles):
        return "every role of the job has failed, so the job fails"
    if policy is EndPolicy.ANY:
        return "the job fails by its failPolicy Any"
    if policy is EndPolicy.RANK0 and rank0_role(job) in failed:
        return f"role {rank0_role(job)} is the job's rank 0, so the job fails by its failPolicy Rank0"
    return None


def job_completion(job: TrainingJob, completed_roles: Collection[str]) -> str | None:
    """Why the job has succeeded, by its completePolicy over the completed roles; None if it has not."""
    counting = [r for r, spec in job.spec.replica_specs.items() if spec.complete_policy is not EndPolicy.NONE]
    done = [role for role in counting if role in completed_roles]
    policy = job.spec.complete_policy
    if policy is EndPolicy.ANY and done:
        return f"role {done[0]} has completed and the job's completePolicy is Any"
    if policy is EndPolicy.ALL and counting and len(done) == len(counting):
        return f"every role that counts ({', '.join(counting)}) has completed (completePolicy All)"
    if policy is EndPolicy.RANK0 and rank0_role(job) in done:
        return (
            f"role {rank0_role(job)} (the job's rank 0) has completed and the job's completePolicy is Rank0"
        )
    return None


def outcome(job: TrainingJob, state: PolicyState, replicas: Mapping[str, int] | None = None) -> JobOutcome:
    """How the job stands: Succeeded, Failed, Timeout, or still going (result None).

    ``replicas``: role -> current number of pod slots (default: each role's ``replicas``).
    """
    counts = {resolve_role(job, role)[0]: n for role, n in (replicas or {}).items()}
    failed_roles: set[str] = set(state.failed_roles)
    completed: set[str] = set()
    reasons: dict[str, str] = dict(state.failed_roles)
    for role, spec in job.spec.replica_specs.items():
        why = role_failure(role, spec, state.failed_pods, counts.get(role))
        if why is not None:
            failed_roles.add(role)
            reasons.setdefault(role, why)
        if role_completed(role, spec, state.succeeded_pods, state.failed_pods, counts.get(role)):
            completed.add(role)
    result = JobOutcome(None, "running", frozenset(completed), frozenset(failed_roles))

    def ended(kind: Outcome, reason: str) -> JobOutcome:
        return JobOutcome(kind, reason, result.succeeded_roles, result.failed_roles)

    if state.job_failure is not None:
        return ended(Outcome.TIMEOUT if state.timed_out else Outcome.FAILED, state.job_failure)
    why_failed = job_failure(job, failed_roles)
    if why_failed is not None:
        first = next(role for role in job.spec.replica_specs if role in failed_roles)
        return ended(Outcome.FAILED, f"{reasons[first]}; {why_failed}")
    why_done = job_completion(job, completed)
    if why_done is not None:
        return ended(Outcome.SUCCEEDED, why_done)
    return result
