"""Isolating a Node after a fault tolerance check found its hardware faulty, and releasing it again.

An isolated Node carries the taint ``trainguard.io/isolated=true:NoSchedule`` (no pod without a toleration
lands there, of any job, later ones too), the label ``trainguard.io/isolated=true`` (``kubectl get nodes -l
trainguard.io/isolated``), the annotation ``trainguard.io/isolated-by`` naming the job, the pod, the item and
its value, and a Warning Event ``NodeIsolated`` on the Node. Pods already running there go on: the controller
ends those it decided to. Release: ``trainguard node release NODE`` (or remove the taint and the label).

The operator needs ``get`` and ``patch`` on nodes for it (the chart's ClusterRole); where RBAC refuses, the
action fails with the API server's words, recorded like any failed action, and nothing else is harmed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.events import COMPONENT
from trainguard.backends.k8s.status import rfc3339

Obj = dict[str, Any]
KEY = "trainguard.io/isolated"
BY = "trainguard.io/isolated-by"
EFFECT = "NoSchedule"
#: Where the Node Events go (a Node has no namespace; kubectl shows them with the Node).
EVENTS_NAMESPACE = "default"


def is_isolated(node: Obj) -> bool:
    taints = (node.get("spec") or {}).get("taints") or ()
    return any(isinstance(t, dict) and t.get("key") == KEY and t.get("effect") == EFFECT for t in taints)


def isolate(kube: Kube, node: str, by: str, reason: str, at: float, key: str) -> bool:
    """Taint, label and annotate ``node``; False where it was isolated already (it is left as it is)."""

    def change(current: Obj) -> Obj | None:
        if is_isolated(current):
            return None
        taints = [
            *((current.get("spec") or {}).get("taints") or ()),
            {"key": KEY, "value": "true", "effect": EFFECT},
        ]
        return {
            "metadata": {"labels": {KEY: "true"}, "annotations": {BY: by[:1024]}},
            "spec": {"taints": taints},
        }

    patched = _patch(kube, node, change, "isolated")
    if patched is not None:
        _event(kube, node, patched["metadata"].get("uid", ""), reason, at, key)
    return patched is not None


def release(kube: Kube, node: str) -> bool:
    """Remove the taint, the label and the annotation; False where the node was not isolated."""

    def change(current: Obj) -> Obj | None:
        if not is_isolated(current):
            return None
        taints = [
            t
            for t in (current.get("spec") or {}).get("taints") or ()
            if not (isinstance(t, dict) and t.get("key") == KEY)
        ]
        return {
            "metadata": {"labels": {KEY: None}, "annotations": {BY: None}},
            "spec": {"taints": taints or None},
        }

    return _patch(kube, node, change, "released") is not None


def _patch(kube: Kube, node: str, change: Callable[[Obj], Obj | None], doing: str) -> Obj | None:
    """Read the Node, and merge-patch ``change(node)`` with the version read (None from ``change``: nothing to
    do); a conflicting write (someone changed the Node meanwhile) is read again, up to a few times. Returns the
    Node as read before the patch, or None where there was nothing to do."""
    for _ in range(5):
        current = kube.get(f"/api/v1/nodes/{node}")
        patch = change(current)
        if patch is None:
            return None
        patch["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        try:
            kube.patch(f"/api/v1/nodes/{node}", patch)
        except ApiError as error:
            if error.status == 409:
                continue
            raise
        return current
    raise ApiError(409, f"node {node} kept changing while it was being {doing}")


def isolated_nodes(kube: Kube) -> list[tuple[str, str]]:
    """(node, why) of every isolated node."""
    found = kube.list("/api/v1/nodes", labelSelector=KEY)
    return [
        (item["metadata"]["name"], (item["metadata"].get("annotations") or {}).get(BY, ""))
        for item in found.get("items") or ()
        if is_isolated(item)
    ]


def _event(kube: Kube, node: str, uid: str, reason: str, at: float, key: str) -> None:
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    when = rfc3339(at)
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{node}.{digest}", "namespace": EVENTS_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid},
        "type": "Warning",
        "reason": "NodeIsolated",
        "message": reason[:1024],
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
        "source": {"component": COMPONENT},
    }
    try:
        kube.create(f"/api/v1/namespaces/{EVENTS_NAMESPACE}/events", body)
    except ApiError as error:
        if error.status != 409:
            raise
