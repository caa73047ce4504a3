"""A job's PodGroup on the API server: created before the job's first pod when its pods name a gang scheduler,
written again when what it says changes, and the PriorityClass it names looked up (what the PodGroup says is
``trainguard.backends.k8s.gang``'s)."""

from __future__ import annotations

import time

from trainguard.api import TrainingJob
from trainguard.backends.k8s.client import ApiError
from trainguard.backends.k8s.gang import (
    API_VERSION,
    PRIORITY_CLASS_TTL,
    Emit,
    pod_group,
    scheduler_of,
    wanted_priority_class,
)
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.shared import Shared
from trainguard.controller.backend import EmitEvent, EventType


def ensure_pod_group(shared: Shared, kind: JobKind, namespace: str, job: TrainingJob, emit: Emit) -> None:
    """The job's PodGroup, before any of its pods, when they name a gang scheduler; written again when
    what it should say changed (a scale, an edit)."""
    if not scheduler_of(job, shared.settings.scheduler):
        return
    uid = job.metadata.uid or ""
    body = pod_group(kind, job, priority_class(shared, job, emit))
    with shared.lock:
        if shared.pod_groups.get(uid) == body["spec"]:
            return
    path = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups"
    try:
        shared.kube.create(path, body)
    except ApiError as error:
        if error.status == 404:  # no PodGroup API: Volcano is not installed
            _no_gang(shared, kind, job, emit)
            return
        if error.status != 409:
            raise
        existing = shared.kube.get(f"{path}/{body['metadata']['name']}")
        if {key: existing.get("spec", {}).get(key) for key in body["spec"]} != body["spec"]:
            shared.kube.patch(f"{path}/{body['metadata']['name']}", {"spec": body["spec"]})
    with shared.lock:
        shared.pod_groups[uid] = body["spec"]


def _no_gang(shared: Shared, kind: JobKind, job: TrainingJob, emit: Emit) -> None:
    """The pods name a gang scheduler whose PodGroups the cluster does not serve: say so on the job (the
    pods are created all the same, and wait for that scheduler)."""
    message = (
        f"the pods name the gang scheduler {scheduler_of(job, shared.settings.scheduler)!r}, and "
        f"the cluster serves no {API_VERSION} PodGroups: install Volcano, or run the operator with "
        "--scheduler-name default-scheduler"
    )
    key = f"{job.metadata.uid or job.name}/no-pod-groups"
    emit(EmitEvent(key, EventType.WARNING, "GangSchedulerMissing", message, shared.clock()))
    with shared.lock:
        shared.pod_groups[job.metadata.uid or ""] = pod_group(kind, job, None)["spec"]


def priority_class(shared: Shared, job: TrainingJob, emit: Emit) -> str | None:
    """The PriorityClass the job asks for, if the cluster has it; else a Warning on the job (once per job
    and name) and none. Looked up again after ``PRIORITY_CLASS_TTL`` seconds, so that a PriorityClass
    created (or deleted) later reaches the PodGroup."""
    name = wanted_priority_class(job)
    if not name:
        return None
    with shared.lock:
        known, at = shared.priority_classes.get(name, (None, 0.0))
    if known is not None and time.monotonic() - at < PRIORITY_CLASS_TTL:
        return name if known else None
    try:
        shared.kube.get(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
        known = True
    except ApiError as error:
        if error.status != 404:
            raise
        known = False
        message = (
            f"the job asks for priority {name!r}, and the cluster has no PriorityClass of that name: its "
            f"PodGroup has none (create one: kubectl create priorityclass {name} --value=N)"
        )
        key = f"{job.metadata.uid or job.name}/priority-class/{name}"
        emit(EmitEvent(key, EventType.WARNING, "PriorityClassNotFound", message, shared.clock()))
    with shared.lock:
        shared.priority_classes[name] = (known, time.monotonic())
    return name if known else None
