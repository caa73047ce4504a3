"""The watch caches keep only the fields the operator reads (``fields``): every reader of a cached pod, node
or job gives the same answer from the projection as from the whole object, for pods in every state the
operator tells apart; what no reader reads is dropped. And a cache lists in pages (``limit`` and ``continue``),
against a fake API server here and against the test cluster's."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import KubeCluster
from tests.k8s.launches import launch
from trainguard.api.load import load_object
from trainguard.backends.k8s import delivery, discovery, manifests, metadata
from trainguard.backends.k8s.cache import LIST_PAGE, Cache, key_of
from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.fields import JOB_FIELDS, NODE_FIELDS, POD_FIELDS, project
from trainguard.backends.k8s.kinds import PYTORCHJOB
from trainguard.backends.k8s.metadata import RENDEZVOUS
from trainguard.backends.k8s.metrics import snapshots
from trainguard.backends.k8s.observe import is_ours, node_ready, observed_pod
from trainguard.backends.k8s.shared import generation_of, owned_by, owner_uid
from trainguard.backends.k8s.status import read_status, without_status
from trainguard.backends.k8s.ui import _last_exit, _model
from trainguard.controller.admission import STATUS_OBJECT, is_held

Obj = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
JOB = load_object(yaml.safe_load((ROOT / "examples/jobs/pytorchjob-elastic.yaml").read_text()), "job").job
JOB_UID = "uid-job"
MANAGED = [{"manager": "kwok", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]
RUNNING = {"running": {"startedAt": "2026-11-27T04:00:00Z"}}


def _terminated(code: int, reason: str = "Error", message: str = "") -> Obj:
    return {
        "terminated": {
            "exitCode": code,
            "reason": reason,
            "message": message,
            "finishedAt": "2026-11-27T04:01:00Z",
        }
    }


def _pod(meta: Obj | None = None, spec: Obj | None = None, status: Obj | None = None) -> Obj:
    """The job's first worker as the API server shows it once kwok runs it (managed fields, the kubelet's
    bookkeeping and all), with ``meta`` and ``spec`` updating its metadata and spec, ``status`` its status
    instead."""
    body = manifests.pod(PYTORCHJOB, JOB, launch(JOB, "worker", 0, {"worker": 3}), manifests.PodSettings())
    body["metadata"]["ownerReferences"][0]["uid"] = JOB_UID
    pod: Obj = {"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(body)}
    pod["metadata"].update(
        namespace="default",
        uid="uid-pod",
        resourceVersion="42",
        creationTimestamp="2026-11-27T04:00:00Z",
        generation=1,
        managedFields=MANAGED,
    )
    pod["spec"].update(nodeName="kwok-node-7", serviceAccountName="default", tolerations=[{"key": "k"}])
    pod["status"] = {
        "phase": "Running",
        "hostIP": "10.0.0.7",
        "podIP": "10.244.7.3",
        "podIPs": [{"ip": "10.244.7.3"}],
        "qosClass": "BestEffort",
        "startTime": "2026-11-27T04:00:00Z",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": "2026-11-27T04:00:01Z",
            },
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": "2026-11-27T04:00:00Z",
            },
        ],
        "containerStatuses": [
            {
                "name": "pytorch",
                "image": "pytorch/pytorch:2.3.0",
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "started": True,
                "state": RUNNING,
                "lastState": {},
            },
        ],
        "initContainerStatuses": [
            {
                "name": delivery.PROBE_CONTAINER,
                "image": "op",
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "state": _terminated(0, "Completed", '{"usable": true}'),
                "lastState": {},
            },
        ],
    }
    pod["metadata"].update(meta or {})
    pod["spec"].update(spec or {})
    if status is not None:
        pod["status"] = status
    return pod


SUMMARY = {"hangs": 1, "workerRestarts": [{"at": 1700000000.5, "exitCode": 137}]}
PODS: dict[str, Obj] = {
    "running": _pod(),
    "pending": _pod(status={"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}),
    "exit 137": _pod(
        status={
            **_pod()["status"],
            "phase": "Failed",
            "containerStatuses": [{"name": "pytorch", "state": _terminated(137)}],
        }
    ),
    "OOMKilled": _pod(
        status={
            **_pod()["status"],
            "phase": "Failed",
            "containerStatuses": [{"name": "pytorch", "state": _terminated(137, "OOMKilled")}],
        }
    ),
    "gave up on a hang": _pod(
        status={
            **_pod()["status"],
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "state": _terminated(1, "Error", json.dumps({"event": "gave-up", "reason": "Hang"})),
                }
            ],
        }
    ),
    "succeeded": _pod(
        status={
            **_pod()["status"],
            "phase": "Failed",
            "containerStatuses": [
                {"name": "pytorch", "state": _terminated(0)},
                {"name": "side", "state": _terminated(2)},
            ],
        }
    ),
    "restarted in place": _pod(
        status={
            **_pod()["status"],
            "containerStatuses": [
                {"name": "pytorch", "state": RUNNING, "lastState": _terminated(143, "Error")}
            ],
        }
    ),
    "evicted": _pod(
        status={**_pod()["status"], "phase": "Failed", "reason": "Evicted", "message": "low on memory"}
    ),
    "preempting": _pod(status={**_pod()["status"], "reason": "Preempting"}),
    "preempted": _pod(
        status={
            **_pod()["status"],
            "conditions": [
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "m",
                }
            ],
        }
    ),
    "evicted through the API": _pod(
        status={
            **_pod()["status"],
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
        }
    ),
    "node's disruption": _pod(
        status={
            **_pod()["status"],
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
            ],
        }
    ),
    "no python3, told by the entry": _pod(
        meta={
            "annotations": {
                manifests.ANNOTATION_AGENT_REPORT: json.dumps({"agentMissing": "no python3 in the image"})
            }
        }
    ),
    "no python3, in the training container's message": _pod(
        status={
            **_pod()["status"],
            "phase": "Succeeded",
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "state": _terminated(
                        0, "Completed", '{"usable": false, "reason": "no python3 in the image"}'
                    ),
                }
            ],
        }
    ),
    "no python3": _pod(
        status={
            **_pod()["status"],
            "initContainerStatuses": [
                {
                    "name": delivery.PROBE_CONTAINER,
                    "state": _terminated(
                        0, "Completed", '{"usable": false, "reason": "no python3 in the image"}'
                    ),
                }
            ],
        }
    ),
    "terminating": _pod(meta={"deletionTimestamp": "2026-11-27T04:02:00Z"}),
    "agent's report": _pod(
        meta={
            "annotations": {
                manifests.ANNOTATION_AGENT_REPORT: json.dumps(SUMMARY),
                manifests.ANNOTATION_IN_PLACE: "2",
            }
        }
    ),
    "host network": _pod(spec={"hostNetwork": True}),
    "no address yet": _pod(status={"phase": "Pending"}),
    "another job's": _pod(
        meta={
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "PyTorchJob", "name": "x", "uid": "other", "controller": True}
            ]
        }
    ),
    "the rendezvous store": _pod(
        meta={"labels": {metadata.LABEL_JOB: JOB.name, metadata.LABEL_COMPONENT: RENDEZVOUS}}
    ),
    "no spec, no status": {"metadata": {"name": "bare", "namespace": "default", "resourceVersion": "1"}},
}

#: Everything the operator reads of a cached pod, reader by reader (a new reader is a new row).
POD_READERS: dict[str, Callable[[Obj], object]] = {
    "cache: key_of, resourceVersion": lambda p: (key_of(p), p["metadata"].get("resourceVersion")),
    "cache: the index's label": lambda p: (p["metadata"].get("labels") or {}).get(metadata.LABEL_JOB),
    "operator: is_ours, is_rendezvous, kind": lambda p: (
        is_ours(p),
        metadata.is_rendezvous(p),
        (p["metadata"].get("labels") or {}).get(metadata.LABEL_KIND),
    ),
    "observe: observed_pod": lambda p: observed_pod(p) if is_ours(p) else None,
    "shared: owner_uid, owned_by, generation_of": lambda p: (
        owner_uid(p),
        owned_by(p, JOB_UID),
        owned_by(p, "other"),
        generation_of(p) if is_ours(p) else None,
    ),
    "operator: a node's pods (spec.nodeName)": lambda p: (p.get("spec") or {}).get("nodeName"),
    "backend: a pod to delete (uid)": lambda p: p["metadata"].get("uid"),
    "discovery: horovod_host": lambda p: discovery.horovod_host(JOB, "pytorch-elastic-worker-0", p),
    "store_pod: phase, node, deleting": lambda p: (
        (p.get("status") or {}).get("phase"),
        (p.get("spec") or {}).get("nodeName"),
        p["metadata"].get("deletionTimestamp"),
    ),
    "agentreports: uid, the report's annotation": lambda p: (
        p["metadata"].get("uid"),
        (p["metadata"].get("annotations") or {}).get(manifests.ANNOTATION_AGENT_REPORT),
    ),
    "ui: last exit, log container": lambda p: (
        _last_exit(p),
        ((p.get("spec", {}).get("containers") or [{}])[0].get("name")),
    ),
}


@pytest.mark.parametrize("reader", POD_READERS)
@pytest.mark.parametrize("pod", PODS)
def test_every_reader_of_a_cached_pod_reads_the_same_of_its_projection(pod: str, reader: str) -> None:
    whole = PODS[pod]
    assert POD_READERS[reader](project(whole, POD_FIELDS)) == POD_READERS[reader](whole)


def test_a_projected_pod_drops_what_nobody_reads() -> None:
    kept = project(PODS["agent's report"], POD_FIELDS)
    assert set(kept) == {"metadata", "spec", "status"}
    assert "managedFields" not in kept["metadata"]
    assert "creationTimestamp" not in kept["metadata"]
    assert kept["spec"] == {"nodeName": "kwok-node-7", "containers": [{"name": "pytorch"}]}
    assert "hostIP" not in kept["status"]
    assert "podIPs" not in kept["status"]
    assert kept["status"]["containerStatuses"] == [{"state": RUNNING, "lastState": {}}]
    assert len(json.dumps(kept)) < len(json.dumps(PODS["agent's report"])) / 3


def test_a_projection_leaves_the_object_as_it_was_and_shares_nothing_with_it() -> None:
    whole = _pod()
    before = copy.deepcopy(whole)
    kept = project(whole, POD_FIELDS)
    kept["metadata"]["labels"]["x"] = "y"
    kept["status"]["conditions"].append({})
    assert whole == before


def _node(ready: str, taints: list[Obj] | None = None, kubelet: str = "fake") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "kwok-node-1",
            "resourceVersion": "7",
            "labels": {"type": "kwok"},
            "managedFields": MANAGED,
        },
        "spec": {"taints": taints or [], "podCIDR": "10.244.1.0/24"},
        "status": {
            "allocatable": {"cpu": "32", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready, "reason": "KubeletReady"},
            ],
            "nodeInfo": {
                "kubeletVersion": kubelet,
                "containerRuntimeVersion": "containerd://2.1.4",
                "osImage": "x",
            },
        },
    }


NODES = {
    "ready": _node("True"),
    "not ready": _node("False"),
    "unknown": _node("Unknown"),
    "unreachable taint": _node("True", [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]),
    "other taint": _node("True", [{"key": "gpu", "effect": "NoSchedule"}]),
    "mounts image volumes": _node("True", kubelet="v1.36.5"),
    "no status": {"metadata": {"name": "bare"}},
}


@pytest.mark.parametrize("node", NODES)
def test_a_projected_node_reads_as_ready_as_the_whole_and_keeps_nothing_else(node: str) -> None:
    whole = NODES[node]
    kept = project(whole, NODE_FIELDS)
    assert (node_ready(kept), key_of(kept)) == (node_ready(whole), key_of(whole))
    assert delivery.node_mounts_image_volumes(kept) == delivery.node_mounts_image_volumes(whole)
    assert "allocatable" not in kept.get("status", {})
    assert "osImage" not in kept.get("status", {}).get("nodeInfo", {})
    assert "managedFields" not in kept["metadata"]


def _job_resource() -> Obj:
    obj = yaml.safe_load((ROOT / "examples/jobs/pytorchjob-elastic.yaml").read_text())
    obj["metadata"].update(
        uid=JOB_UID,
        resourceVersion="9",
        generation=2,
        creationTimestamp="2026-11-27T04:00:00Z",
        annotations={"a": "b"},
        labels={"team": "x"},
        managedFields=MANAGED,
    )
    return obj


JOB_READERS: dict[str, Callable[[Obj], object]] = {
    "operator: the model (load_object)": lambda o: load_object(without_status(o), "job").job,
    "operator: read_status, held": lambda o: (read_status(o), is_held(read_status(o), STATUS_OBJECT)),
    "metrics: snapshots": lambda o: snapshots(lambda: [o])(),
    "ui: the model, the resource's version and creation": lambda o: (
        _model(o, PYTORCHJOB),
        o["metadata"]["resourceVersion"],
        o["metadata"]["creationTimestamp"],
    ),
    "reconcile: deleting": lambda o: o["metadata"].get("deletionTimestamp"),
}


@pytest.mark.parametrize("reader", JOB_READERS)
def test_every_reader_of_a_cached_job_reads_the_same_of_its_projection(reader: str) -> None:
    whole = _job_resource()
    assert JOB_READERS[reader](project(whole, JOB_FIELDS)) == JOB_READERS[reader](whole)
    assert "managedFields" not in project(whole, JOB_FIELDS)["metadata"]


# ---- listing in pages ----------------------------------------------------------------------------------


class PagedKube(Kube):
    """A fake API server's list: ``count`` pods, served ``limit`` at a time with continue tokens."""

    def __init__(self, count: int, expire_at: int | None = None) -> None:
        self.objects = [_pod(meta={"name": f"p{n}"}) for n in range(count)]
        self.asked: list[dict[str, Any]] = []
        self.expire_at = expire_at

    def list(self, path: str, **query: Any) -> Obj:
        self.asked.append(query)
        start = int(query.get("continue") or 0)
        if self.expire_at is not None and start >= self.expire_at:
            self.expire_at = None
            raise ApiError(410, "the provided continue parameter is too old")
        end = start + int(query["limit"])
        meta = {"resourceVersion": "77", **({"continue": str(end)} if end < len(self.objects) else {})}
        return {"metadata": meta, "items": self.objects[start:end]}


def test_a_cache_lists_in_pages_and_keeps_the_projection_of_every_object() -> None:
    kube = PagedKube(2 * LIST_PAGE + 3)
    changed: list[Obj] = []
    cache = Cache(
        kube, "/api/v1/pods", lambda obj, now: changed.append(obj), label_selector="a", fields=POD_FIELDS
    )
    assert cache._list() == "77"
    assert [q.get("continue") for q in kube.asked] == [None, str(LIST_PAGE), str(2 * LIST_PAGE)]
    assert all(q["limit"] == LIST_PAGE and q["labelSelector"] == "a" for q in kube.asked)
    assert len(cache.items()) == len(changed) == 2 * LIST_PAGE + 3
    assert cache.get("default", "p3") == project(kube.objects[3], POD_FIELDS)
    assert all("managedFields" not in obj["metadata"] for obj in changed)


def test_a_continue_token_that_expired_fails_the_list_and_the_next_one_starts_over() -> None:
    kube = PagedKube(LIST_PAGE + 1, expire_at=LIST_PAGE)
    cache = Cache(kube, "/api/v1/pods", lambda obj, now: None)
    with pytest.raises(ApiError) as failed:
        cache._list()
    assert failed.value.status == 410
    assert cache.items() == []
    kube.asked.clear()
    assert cache._list() == "77"
    assert [q.get("continue") for q in kube.asked] == [None, str(LIST_PAGE)]
    assert len(cache.items()) == LIST_PAGE + 1


def test_what_a_write_returned_is_kept_as_its_projection() -> None:
    cache = Cache(None, "/api/v1/pods", lambda obj, now: None, fields=POD_FIELDS)  # type: ignore[arg-type]
    cache.put(_pod())
    assert cache.get("default", "pytorch-elastic-worker-0") == project(_pod(), POD_FIELDS)


@pytest.mark.k8s
def test_the_api_servers_pages_add_up_to_the_whole_list(kube_cluster: KubeCluster) -> None:
    kube = Kube(str(kube_cluster.kubeconfig))
    namespace = f"pages-{uuid.uuid4().hex[:8]}"
    kube.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    try:
        for n in range(7):
            kube.create(
                path, {"metadata": {"name": f"c{n}", "labels": {"set": "pages"}}, "data": {"n": str(n)}}
            )
        pages = list(kube.list_pages(path, 3, labelSelector="set=pages"))
        assert [len(page["items"]) for page in pages] == [3, 3, 1]
        names = [item["metadata"]["name"] for page in pages for item in page["items"]]
        assert names == [f"c{n}" for n in range(7)]
        assert pages[-1]["metadata"]["resourceVersion"] == pages[0]["metadata"]["resourceVersion"]
    finally:
        kube.delete(f"/api/v1/namespaces/{namespace}")
        kube.close()
