"""Looking up roles and their pod slots, the same way everywhere (role names match case-insensitively)."""

from __future__ import annotations

from trainguard.api.model import ReplicaSpec, RestartScope, TrainingJob
from trainguard.policy.types import PodRef

#: Role names and replica types that make a role the job's "rank 0" for job-level Rank0 policies, and a
#: Horovod job's launcher (the role that runs horovodrun; the others are its hosts).
_LEADER_NAMES = frozenset({"master", "launcher", "chief"})


def resolve_role(job: TrainingJob, name: str) -> tuple[str, ReplicaSpec]:
    """The role's name as the job spells it, and its spec; ValueError listing the roles if there is none."""
    for key, spec in job.spec.replica_specs.items():
        if key == name or key.lower() == name.lower():
            return key, spec
    roles = ", ".join(job.spec.replica_specs)
    raise ValueError(f"job {job.name} has no role {name!r}; its roles: {roles}")


def canonical(job: TrainingJob, pod: PodRef) -> PodRef:
    role, _ = resolve_role(job, pod.role)
    return pod if role == pod.role else PodRef(role, pod.index)


def slots(job: TrainingJob, role: str, replicas: int | None = None) -> tuple[PodRef, ...]:
    """The pod slots 0..replicas-1 of a role (its desired replicas unless given)."""
    key, spec = resolve_role(job, role)
    count = spec.replicas if replicas is None else replicas
    return tuple(PodRef(key, index) for index in range(count))


def pods_in_scope(job: TrainingJob, pod: PodRef, scope: RestartScope) -> tuple[PodRef, ...]:
    """The pods a restart of ``scope`` touches: the pod, every pod of its role, or every pod of the job.

    A role's pods are its slots 0..replicas-1, and always the faulted pod (it may lie beyond a scale-in).
    """
    if scope is RestartScope.POD:
        return (pod,)
    roles = [pod.role] if scope is RestartScope.REPLICA else list(job.spec.replica_specs)
    touched = [ref for role in roles for ref in slots(job, role)]
    return tuple(sorted({*touched, pod}, key=lambda ref: (roles.index(ref.role), ref.index)))


def role_order(job: TrainingJob) -> tuple[str, ...]:
    """Roles in rank order: a master, launcher or chief role (by name or replica type) first, as Kubeflow gives
    its Master rank 0; then the others, in the job's order."""

    items = list(job.spec.replica_specs.items())
    return tuple(key for key, _ in sorted(items, key=lambda item: not _leader(*item)))


def is_leader(job: TrainingJob, role: str) -> bool:
    """A master, launcher or chief role (by name or replica type): first in rank order, and in a Horovod job
    the launcher, whose pod runs horovodrun and is not one of its hosts."""
    return _leader(role, job.spec.replica_specs[role])


def _leader(role: str, spec: ReplicaSpec) -> bool:
    return role.lower() in _LEADER_NAMES or (spec.replica_type or "").lower() in _LEADER_NAMES


def rank0_role(job: TrainingJob) -> str:
    """The role a job-level Rank0 policy watches: the first in rank order (``role_order``)."""
    return role_order(job)[0]
