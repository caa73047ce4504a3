"""Isolating a Node after a fault tolerance check found its hardware faulty, and releasing it again.

An isolated Node carries the taint ``trainguard.io/isolated=true:NoSchedule`` (no pod without a toleration
lands there, of any job, later ones too), the label ``trainguard.io/isolated=true`` (``kubectl get nodes -l
trainguard.io/isolated``), the annotation ``trainguard.io/isolated-by`` naming the job, the pod, the item and
its value (or the node checker's pod, ``nodechecker``), and a Warning Event ``NodeIsolated`` on the Node. Pods already running there go on: the controller
ends those it decided to. Release: ``trainguard node release NODE`` (or remove the taint and the label).

The operator needs ``get`` and ``patch`` on nodes for it (the chart's ClusterRole); where RBAC refuses, the
action fails with the API server's words, recorded like any failed action, and nothing else is harmed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from trainguard.backends.k8s import metadata
from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.events import COMPONENT
from trainguard.backends.k8s.status import rfc3339
from trainguard.policy import cooldown
from trainguard.policy.cooldown import IsolatedNode

Obj = dict[str, Any]
KEY = "trainguard.io/isolated"
BY = "trainguard.io/isolated-by"
#: When it was isolated (seconds since the epoch, the operator's clock), and its strikes: the isolations since an
#: administrator last released it (``trainguard.policy.cooldown``), kept through a release on probation.
AT = metadata.ANNOTATION_ISOLATED_AT
STRIKES = metadata.ANNOTATION_ISOLATION_STRIKES
#: The label of a node released after its cool-down: the next pod's pre-check there is its re-check.
PROBATION = "trainguard.io/probation"
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
        strikes = strikes_of(current) + 1
        return {
            "metadata": {
                "labels": {KEY: "true", PROBATION: None},
                "annotations": {BY: by[:1024], AT: f"{at:.0f}", STRIKES: str(strikes)},
            },
            "spec": {"taints": taints},
        }

    patched = _patch(kube, node, change, "isolated")
    if patched is not None:
        node_event(kube, node, reason, at, key, uid=patched["metadata"].get("uid", ""))
    return patched is not None


def release(kube: Kube, node: str, *, probation: bool = False) -> bool:
    """Remove the taint, the label and the annotations; False where the node was not isolated. An
    administrator's release clears its strikes too; one ``probation`` (after its cool-down) keeps them and
    labels the node ``PROBATION``."""

    def change(current: Obj) -> Obj | None:
        if not is_isolated(current):
            return None
        taints = [
            t
            for t in (current.get("spec") or {}).get("taints") or ()
            if not (isinstance(t, dict) and t.get("key") == KEY)
        ]
        return {
            "metadata": {
                "labels": {KEY: None, PROBATION: "true" if probation else None},
                "annotations": {BY: None, AT: None, **({} if probation else {STRIKES: None})},
            },
            "spec": {"taints": taints or None},
        }

    return _patch(kube, node, change, "released") is not None


def strikes_of(node: Obj) -> int:
    """The node's strikes (``STRIKES``): 0 where it has none, or they cannot be read."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(STRIKES, "")
    return int(text) if str(text).isdigit() else 0


def isolated_record(node: Obj) -> IsolatedNode | None:
    """An isolated node as its cool-down reads it (None: not isolated, or not by a check: no ``AT``)."""
    if not is_isolated(node):
        return None
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(AT, "")
    try:
        since = float(text)
    except ValueError:
        return None
    return IsolatedNode(node["metadata"]["name"], since, max(strikes_of(node), 1))


def release_cooled(kube: Kube, nodes: list[Obj], base: float, now: float) -> list[str]:
    """Release on probation the isolated ``nodes`` whose cool-down (``base``, doubled each strike) is over,
    each with a Normal Node Event ``NodeReleased``; the nodes released."""
    records = {record.name: record for record in map(isolated_record, nodes) if record is not None}
    released = []
    for name in cooldown.due(records.values(), base, now):
        record = records[name]
        if release(kube, name, probation=True):
            released.append(name)
            took = cooldown.cooldown_of(record.strikes, base)
            node_event(
                kube,
                name,
                f"node {name} released on probation after its cool-down of {took:.0f} s (strike "
                f"{record.strikes}): the next pod's pre-check there is its re-check, and a fault found again "
                f"isolates it for {cooldown.cooldown_of(record.strikes + 1, base):.0f} s",
                now,
                f"released/{name}/{record.since:.0f}",
                kind="Normal",
                reason="NodeReleased",
            )
    return released


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


def node_event(
    kube: Kube,
    node: str,
    message: str,
    at: float,
    key: str,
    *,
    uid: str = "",
    kind: str = "Warning",
    reason: str = "NodeIsolated",
) -> None:
    """An Event on the Node (in ``EVENTS_NAMESPACE``), once per ``key``."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    when = rfc3339(at)
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{node}.{digest}", "namespace": EVENTS_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid},
        "type": kind,
        "reason": reason,
        "message": message[:1024],
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
