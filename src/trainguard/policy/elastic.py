"""Elastic roles: a role is elastic when minReplicas < maxReplicas (docs/policy.md §6, Elastic roles, success
and failure).

- ``validate_scale`` rejects a new ``replicas`` outside [min, max]; ``scale_refusal`` says so to a user.
- A permanently failed pod that the role's failPolicy tolerates shrinks the role (the pod is not replaced)
  as long as the pods still alive are at least minReplicas (see decide.py).
- ``pods_to_add`` says which slots to start when capacity returns, growing back toward the desired replicas.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from trainguard.api.model import TrainingJob
from trainguard.policy.roles import resolve_role
from trainguard.policy.types import PodRef, PolicyState

#: CCE: a job is elastic only with fault tolerance on.
NOT_ELASTIC = (
    "spec.faultTolerant is false, so the job is not elastic; set spec.faultTolerant: true to scale it"
)


def validate_scale(job: TrainingJob, role: str, replicas: int) -> None:
    """Raise ValueError("replicas 7 outside [1, 5]") when ``replicas`` does not fit the role's bounds."""
    _, spec = resolve_role(job, role)
    if not job.spec.fault_tolerant:
        raise ValueError(NOT_ELASTIC)
    low, high = spec.min_count, spec.max_count
    if not low <= replicas <= high:
        raise ValueError(f"replicas {replicas} outside [{low}, {high}]")


def scale_refusal(job: TrainingJob, role: str, replicas: int) -> str | None:
    """Why a request to scale ``role`` to ``replicas`` is refused, in the words every front end shows (the
    CLI, the job pages), or None when it may go ahead."""
    key, spec = resolve_role(job, role)
    if not job.spec.fault_tolerant:
        return f"job {job.name}: {NOT_ELASTIC}"
    low, high = spec.min_count, spec.max_count
    if low <= replicas <= high:
        return None
    return (
        f"job {job.name}: role {key}: replicas {replicas} outside [{low}, {high}] "
        "(minReplicas..maxReplicas); choose a value in that range"
    )


def pods_to_add(
    job: TrainingJob,
    role: str,
    alive: Collection[int],
    free_slots: int,
    desired: int | None = None,
) -> tuple[PodRef, ...]:
    """The pods to start so that the role grows back toward ``desired`` (default: its ``replicas``).

    ``alive``: indices of the role's pods alive now; ``free_slots``: how many more pods the nodes can take.
    The lowest free indices are filled first, so pod names stay dense (``trainer-0..N-1``).
    """
    key, spec = resolve_role(job, role)
    target = min(spec.replicas if desired is None else desired, spec.max_count)
    missing = [index for index in range(target) if index not in alive]
    room = max(free_slots, 0)
    return tuple(PodRef(key, index) for index in missing[:room])


def record_grown(state: PolicyState, pods: Collection[PodRef]) -> PolicyState:
    """The state after ``pods`` were started again to grow a role: they are no longer failed for good."""
    counters = {ref: replace(state.pod(ref), running_since=None) for ref in pods}
    return replace(
        state,
        failed_pods=state.failed_pods - frozenset(pods),
        succeeded_pods=state.succeeded_pods - frozenset(pods),
        pods={**state.pods, **counters},
    )
