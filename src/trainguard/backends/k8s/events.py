"""Events as the operator writes them (``kubectl get events`` and ``describe`` show them)."""

from __future__ import annotations

import hashlib
from typing import Any

from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.status import rfc3339
from trainguard.controller.backend import EmitEvent

Obj = dict[str, Any]
COMPONENT = "trainguard-operator"


def event_body(kind: JobKind, namespace: str, name: str, uid: str, action: EmitEvent, identity: str) -> Obj:
    """The Event object of ``action``: named after its key (so it is created once), about the job or a pod."""
    digest = hashlib.sha256(action.key.encode()).hexdigest()[:16]
    when = rfc3339(action.at)
    involved: Obj = {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "name": name,
        "namespace": namespace,
        "uid": uid,
    }
    if action.pod is not None:
        involved = {"apiVersion": "v1", "kind": "Pod", "name": action.pod, "namespace": namespace}
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{digest}", "namespace": namespace},
        "involvedObject": involved,
        "type": action.type.value,
        "reason": action.reason,
        "message": action.message[:1024],
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": identity,
    }
    return body
