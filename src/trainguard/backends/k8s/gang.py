"""Gang scheduling: a job whose pods name a gang scheduler (Volcano) gets a PodGroup, so that it starts as a
whole or not at all.

Volcano places the pods of one PodGroup together: none is bound until ``minMember`` of them fit at once
(and ``minResources`` is free in the queue). The operator creates the job's PodGroup before its first pod,
names it on every pod (the annotation ``scheduling.k8s.io/group-name``), writes it again when what it should
say changes (a scale of a role whose replicas are its minimum), and leaves its deletion to the garbage
collector (the job owns it). What it says, from the job (Kubeflow's ``runPolicy.schedulingPolicy`` names
each field; a field left out is derived):

- ``minMember``: ``minAvailable``, else the pods the job needs to run, the sum of the roles' minimum replicas;
- ``minResources``: ``minResources``, else the requests of those pods (a container's limits where it has no
  requests, as Kubernetes defaults them), summed per resource;
- ``queue``: ``queue``, else ``default``;
- ``priorityClassName``: ``priorityClass``, else the job's ``priority`` (CCE's ``priority: normal``), where
  such a PriorityClass exists; ``priority_class`` checks (again every ``PRIORITY_CLASS_TTL`` seconds) and warns
  otherwise.

What the PodGroup says is pure, here (``pod_group_spec``); creating it and looking up its PriorityClass on the
API server is the backend's part (``trainguard.backends.k8s.podgroups``).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.metadata import object_meta
from trainguard.controller.backend import EmitEvent

Obj = dict[str, Any]
#: Sends an Event about the job (the backend's).
Emit = Callable[[EmitEvent], None]

#: Scheduler names that gang-schedule through Volcano's PodGroup.
GANG_SCHEDULERS = frozenset({"volcano"})
ANNOTATION_GROUP = "scheduling.k8s.io/group-name"
API_VERSION = "scheduling.volcano.sh/v1beta1"
DEFAULT_QUEUE = "default"
#: Seconds the operator trusts what it learnt of a PriorityClass (that it exists, or not).
PRIORITY_CLASS_TTL = 60.0

_BINARY: dict[str, Decimal | int] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_DECIMAL: dict[str, Decimal | int] = {
    "m": Decimal("0.001"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def scheduler_of(job: TrainingJob, override: str | None) -> str | None:
    """The gang scheduler the job's pods name (``override`` replaces every template's), if any."""
    for spec in job.spec.replica_specs.values():
        name = override or (spec.template.get("spec") or {}).get("schedulerName")
        if name in GANG_SCHEDULERS:
            return str(name)
    return None


def group_name(job: TrainingJob) -> str:
    return job.name


def min_member(job: TrainingJob) -> int:
    policy = job.spec.scheduling_policy
    if policy is not None and policy.min_available is not None:
        return policy.min_available
    return sum(spec.min_count for spec in job.spec.replica_specs.values())


def min_resources(job: TrainingJob) -> dict[str, str]:
    """What ``min_member`` pods request, summed per resource; raises ValueError naming a bad quantity."""
    policy = job.spec.scheduling_policy
    if policy is not None and policy.min_resources is not None:
        return dict(policy.min_resources)
    total: dict[str, Decimal] = {}
    for role, spec in job.spec.replica_specs.items():
        for name, amount in pod_requests(spec.template, role).items():
            total[name] = total.get(name, Decimal(0)) + amount * spec.min_count
    return {name: format_quantity(amount) for name, amount in sorted(total.items())}


def pod_requests(template: Obj, role: str) -> dict[str, Decimal]:
    """The requests of a pod of ``template``: its containers' (limits where a container has no request)."""
    found: dict[str, Decimal] = {}
    for number, container in enumerate((template.get("spec") or {}).get("containers") or []):
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in asked.items():
            where = f"{role}: containers[{number}].resources: {name}"
            found[name] = found.get(name, Decimal(0)) + parse_quantity(value, where)
    return found


def parse_quantity(value: object, where: str = "quantity") -> Decimal:
    text = str(value).strip()
    for suffixes in (_BINARY, _DECIMAL):
        for suffix, factor in suffixes.items():
            if text.endswith(suffix) and text[: -len(suffix)]:
                return _number(text[: -len(suffix)], where, text) * Decimal(factor)
    return _number(text, where, text)


def _number(text: str, where: str, whole: str) -> Decimal:
    try:
        number = Decimal(text)
    except InvalidOperation:
        number = Decimal(-1)
    if not number.is_finite() or number < 0:
        raise ValueError(f"{where}: {whole!r} is not a Kubernetes quantity (e.g. 500m, 2, 1Gi)")
    return number


def format_quantity(amount: Decimal) -> str:
    """Whole amounts as integers, the rest in thousandths ("1500m")."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int((amount * 1000).to_integral_value())}m"


def pod_group_spec(job: TrainingJob, priority_class: str | None) -> Obj:
    """The spec of the job's PodGroup (``priority_class``: one that exists, or None)."""
    policy = job.spec.scheduling_policy
    spec: Obj = {
        "minMember": min_member(job),
        "minResources": min_resources(job),
        "queue": (policy.queue if policy is not None and policy.queue else None) or DEFAULT_QUEUE,
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def wanted_priority_class(job: TrainingJob) -> str | None:
    """The PriorityClass the job asks for: ``schedulingPolicy.priorityClass``, else its ``priority``."""
    policy = job.spec.scheduling_policy
    if policy is not None and policy.priority_class:
        return policy.priority_class
    return job.spec.priority or None


def pod_group(kind: JobKind, job: TrainingJob, priority_class: str | None) -> Obj:
    """The job's PodGroup (``priority_class``: one that exists, or None)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": object_meta(kind, job, group_name(job), {}),
        "spec": pod_group_spec(job, priority_class),
    }
