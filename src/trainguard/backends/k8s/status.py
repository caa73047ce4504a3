"""The job's status as the custom resource stores it: the controller's ``JobStatus``, with the conditions'
times as Kubernetes writes them, the selector the scale subresource reads, and for CCE's AITrainingJob its own
``RestartCount`` key beside ``restartCounts``."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.k8s import metadata
from trainguard.backends.k8s.kinds import AITRAININGJOB, JobKind
from trainguard.backends.k8s.observe import parse_time
from trainguard.controller.status import JobStatus

Obj = dict[str, Any]


#: Condition times are written as Kubernetes writes them (RFC 3339, UTC, whole seconds), as CCE's docs
#: show them;
#: the controller keeps epoch seconds. Every other time of the status stays in epoch seconds.
_CONDITION_TIMES = ("lastTransitionTime", "lastProbeTime")
#: CCE's own key for the restarts per role (``.status.RestartCount.trainer``, as CCE's page shows it), written
#: beside trainguard's ``restartCounts`` for AITrainingJobs, so that CCE's scripts read what they expect.
CCE_RESTART_COUNT = "RestartCount"


def status_document(kind: JobKind, job: TrainingJob, status: JobStatus) -> Obj:
    """The controller's status as stored, plus the label selector that the scale subresource reads."""
    selector = f"{metadata.LABEL_JOB}={job.name},{metadata.LABEL_ROLE}={kind.status_role}"
    document = {**status.to_dict(), "selector": selector}
    if kind.kind == AITRAININGJOB.kind:
        document[CCE_RESTART_COUNT] = dict(document.get("restartCounts") or {})
    document["conditions"] = [
        {**c, **{k: rfc3339(c[k]) for k in _CONDITION_TIMES if isinstance(c.get(k), (int, float))}}
        for c in document.get("conditions") or []
    ]
    return document


def read_status(obj: Obj) -> JobStatus:
    data = dict(obj.get("status") or {})
    data.pop("selector", None)
    data.pop(CCE_RESTART_COUNT, None)
    if not data:
        return JobStatus()
    data["conditions"] = [
        {**c, **{k: parse_time(c[k]) for k in _CONDITION_TIMES if isinstance(c.get(k), str)}}
        for c in data.get("conditions") or []
    ]
    return JobStatus.from_dict(data)


def rfc3339(epoch: float) -> str:
    # Whole seconds first: fromtimestamp rounds to the microsecond, which carries 1.9999995 over to 2.
    return datetime.fromtimestamp(math.floor(epoch), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def without_status(obj: Obj) -> Obj:
    """The job as the model reads it: what the user wrote (kind, name, labels, annotations, spec), not its status."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {
            key: meta[key] for key in ("name", "namespace", "uid", "labels", "annotations") if key in meta
        },
        "spec": obj.get("spec"),
    }
