"""What the watch caches keep of each object: the fields the operator reads, and nothing else.

A pod as the API server sends it is mostly what the operator never reads (its managed fields, its containers'
specs, the kubelet's bookkeeping); kept whole, 4,000 of them cost several times what the operator needs.
So each cache keeps a projection (``project``), declared here as data: ``Fields`` maps a field's name to
``...`` (its value whole) or, for an object or a list of objects, to the ``Fields`` kept of it. A field not
named is dropped. Whoever needs more of an object than its cache keeps GETs it from the API server.

Every reader of a cache reads only what its ``Fields`` name (``tests/k8s/test_cache_fields.py`` holds them,
reader by reader): a reader of a new field names it here, and a row there.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from types import EllipsisType
from typing import Any

from trainguard.backends.k8s.metadata import (
    ANNOTATION_ISOLATED_AT,
    ANNOTATION_ISOLATION_STRIKES,
    ANNOTATION_NODE_CHECK,
)

Obj = dict[str, Any]
Fields = Mapping[str, "Fields | EllipsisType"]

#: Strings up to this long are interned: labels, namespaces, phases, node names repeat across thousands of pods.
_INTERN_MAX = 64

#: A job resource: what the model is loaded from (``api.load``), its status (``status.read_status``), the
#: version its status is written at, and its deletion. The status is the controller's and is kept whole.
JOB_FIELDS: Fields = {
    "apiVersion": ...,
    "kind": ...,
    "metadata": {
        "name": ...,
        "namespace": ...,
        "uid": ...,
        "resourceVersion": ...,
        "generation": ...,
        "creationTimestamp": ...,
        "deletionTimestamp": ...,
        "labels": ...,
        "annotations": ...,
    },
    "spec": ...,
    "status": ...,
}

#: A pod of a job: which job, role, index and generation it is (labels, owner), what the agent said
#: (annotations), where it runs and at which address, and how it ended (``observe.observed_pod``,
#: ``discovery.horovod_host``, ``store_pod``, ``agentreports``, ``ui``).
POD_FIELDS: Fields = {
    "metadata": {
        "name": ...,
        "namespace": ...,
        "uid": ...,
        "resourceVersion": ...,
        "deletionTimestamp": ...,
        "labels": ...,
        "annotations": ...,
        "ownerReferences": {"uid": ..., "controller": ...},
    },
    "spec": {"nodeName": ..., "hostNetwork": ..., "containers": {"name": ...}},
    "status": {
        "phase": ...,
        "reason": ...,
        "podIP": ...,
        "conditions": {"type": ..., "status": ..., "reason": ...},
        "containerStatuses": {"state": ..., "lastState": ...},
        "initContainerStatuses": {"name": ..., "state": ...},
    },
}

#: A node: its readiness (``observe.node_ready``) and isolation (``isolation.is_isolated``: the taint's key and
#: effect), and nothing of its capacity, images or addresses.
NODE_FIELDS: Fields = {
    # The isolation's annotations, for its cool-down (``isolation.isolated_record``): only on isolated nodes.
    "metadata": {
        "name": ...,
        "resourceVersion": ...,
        "annotations": {ANNOTATION_ISOLATED_AT: ..., ANNOTATION_ISOLATION_STRIKES: ...},
    },
    "spec": {"taints": {"key": ..., "effect": ...}},
    # nodeInfo: whether the node mounts image volumes (``delivery.supports_image_volume``).
    "status": {
        "conditions": {"type": ..., "status": ...},
        "nodeInfo": {"kubeletVersion": ..., "containerRuntimeVersion": ...},
    },
}


#: A node checker's pod (``nodechecker.trusted_checks``): whether it is the checker's (namespace, labels, owner,
#: ServiceAccount), the node it is bound to, and its latest check (its ``trainguard.io/node-check`` annotation).
CHECKER_POD_FIELDS: Fields = {
    "metadata": {
        "name": ...,
        "namespace": ...,
        "resourceVersion": ...,
        "labels": ...,
        "annotations": {ANNOTATION_NODE_CHECK: ...},
        "ownerReferences": {"kind": ..., "name": ..., "controller": ...},
    },
    "spec": {"nodeName": ..., "serviceAccountName": ...},
}


def project(obj: Obj, fields: Fields) -> Obj:
    """The fields of ``obj`` that ``fields`` names (new dicts and lists; ``obj`` is left as it is)."""
    kept: Obj = {}
    for name, inner in fields.items():
        if name not in obj:
            continue
        value = obj[name]
        kept[sys.intern(name)] = _whole(value) if inner is ... else _part(value, inner)
    return kept


def _part(value: Any, fields: Fields) -> Any:
    if isinstance(value, dict):
        return project(value, fields)
    if isinstance(value, list):
        return [_part(item, fields) for item in value]
    return _whole(value)  # not what the API says it is: kept as it came, for the reader to judge


def _whole(value: Any) -> Any:
    """``value`` with its short strings interned (a dict of labels: the same few keys and values on every pod)."""
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= _INTERN_MAX else value
    if isinstance(value, dict):
        return {_whole(k): _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    return value
