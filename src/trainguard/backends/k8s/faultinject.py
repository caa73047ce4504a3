"""The fault tolerance check's injection aid on Kubernetes (a test aid, off unless the operator runs with
``--fault-injection``, the chart's ``faultInjection: true``): the ConfigMap ``trainguard-fault-injection`` of
a namespace holds, under the key of a node's name, the check items that read as faulty on that node, one a
line. Every pod of that namespace mounts it (``manifests.FAULT_INJECT_DIR``, optional: pods start without
it) and its agent reads ``<dir>/<its node>`` (``contract.ENV_FAULT_INJECT``, ``contract.ENV_NODE_NAME``).
Nothing is broken: the checks are told so. kubelet brings a change to running pods within about a minute.
"""

from __future__ import annotations

from typing import Any

from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.manifests import FAULT_INJECT_CONFIG_MAP

Obj = dict[str, Any]


def injected(kube: Kube, namespace: str) -> dict[str, tuple[str, ...]]:
    """Node -> the items injected there, in ``namespace`` (empty where the ConfigMap does not exist)."""
    try:
        found = kube.get(_path(namespace, FAULT_INJECT_CONFIG_MAP))
    except ApiError as error:
        if error.status == 404:
            return {}
        raise
    return {node: _items(text) for node, text in (found.get("data") or {}).items()}


def inject(kube: Kube, namespace: str, node: str, items: tuple[str, ...]) -> None:
    """The checks of ``namespace``'s pods on ``node`` read ``items`` as faulty (added to those already there)."""
    _change(kube, namespace, node, lambda old: tuple(dict.fromkeys((*old, *items))))


def repair(kube: Kube, namespace: str, node: str) -> bool:
    """Nothing injected on ``node`` any more; False where nothing was."""
    return _change(kube, namespace, node, lambda old: ())


def _change(kube: Kube, namespace: str, node: str, new: Any) -> bool:
    """Read, change the node's key, write with the version read (a conflict is read again, a few times)."""
    for _ in range(5):
        try:
            current: Obj | None = kube.get(_path(namespace, FAULT_INJECT_CONFIG_MAP))
        except ApiError as error:
            if error.status != 404:
                raise
            current = None
        data = dict((current or {}).get("data") or {})
        old = _items(data.get(node, ""))
        items = new(old)
        if items == old:
            return False
        if items:
            data[node] = "".join(f"{item}\n" for item in items)
        else:
            data.pop(node, None)
        body: Obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": FAULT_INJECT_CONFIG_MAP, "namespace": namespace},
            "data": data,
        }
        try:
            if current is None:
                kube.create(f"/api/v1/namespaces/{namespace}/configmaps", body)
            else:
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                kube.replace(_path(namespace, FAULT_INJECT_CONFIG_MAP), body)
        except ApiError as error:
            if error.status == 409:
                continue
            raise
        return True
    raise ApiError(409, f"ConfigMap {namespace}/{FAULT_INJECT_CONFIG_MAP} kept changing while it was written")


def _items(text: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def _path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps/{name}"
