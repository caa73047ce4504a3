"""Isolating a node on Kubernetes, without a cluster (the API server is a fake that keeps Nodes and ConfigMaps
and can refuse as RBAC does): the taint, label, annotation and Node Event; release; a node that cannot be
tainted is a failed action recorded like any other, the rest of the batch goes on and the job is not harmed;
the pods' wiring (their node by the downward API, the injection aid only when asked); the reasons the agent's
final report gives; the injection ConfigMap.
"""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

import pytest
import yaml

from tests.k8s.operator_harness import ROOT
from trainguard.api.load import load_object
from trainguard.backends.k8s import faultinject, isolation, manifests, observe
from trainguard.backends.k8s.backend import JobBackend
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import ApiError
from trainguard.backends.k8s.fields import NODE_FIELDS, project
from trainguard.backends.k8s.kinds import AITRAININGJOB
from trainguard.backends.k8s.shared import Shared
from trainguard.controller import reconcile
from trainguard.controller.backend import EmitEvent, EventType, IsolateNode, LaunchPod, Observed
from trainguard.controller.status import JobStatus
from trainguard.pod import contract

CCE_JOB = ROOT / "examples" / "jobs" / "cce-horovod-elastic.yaml"
Obj = dict[str, Any]
FORBIDDEN = (
    'nodes "n1" is forbidden: User "system:serviceaccount:trainguard-system:trainguard-operator" cannot patch '
    'resource "nodes" in API group "" at the cluster scope'
)


class FakeApi:
    """Nodes and ConfigMaps with resourceVersions; ``refuse``: (method, kind) pairs answered 403; ``conflicts``:
    how many patches to answer 409 first (someone else wrote the Node meanwhile)."""

    def __init__(self, nodes: list[str]) -> None:
        self.objects: dict[str, Obj] = {
            f"/api/v1/nodes/{n}": {
                "metadata": {"name": n, "uid": f"uid-{n}", "resourceVersion": "1"},
                "spec": {"taints": [{"key": "gpu", "value": "a100", "effect": "PreferNoSchedule"}]},
            }
            for n in nodes
        }
        self.events: list[tuple[str, Obj]] = []
        self.refuse: set[tuple[str, str]] = set()
        self.conflicts = 0
        self.lock = threading.Lock()

    def _check(self, method: str, path: str) -> None:
        kind = "nodes" if "/nodes" in path else "configmaps" if "/configmaps" in path else "events"
        if (method, kind) in self.refuse:
            raise ApiError(403, FORBIDDEN)

    def get(self, path: str) -> Obj:
        self._check("get", path)
        if path not in self.objects:
            raise ApiError(404, "not found")
        return copy.deepcopy(self.objects[path])

    def list(self, path: str, **query: Any) -> Obj:
        key = query.get("labelSelector")
        items = [
            copy.deepcopy(o)
            for p, o in self.objects.items()
            if p.startswith(path + "/") and (key is None or key in (o["metadata"].get("labels") or {}))
        ]
        return {"items": items}

    def patch(self, path: str, body: Obj) -> Obj:
        self._check("patch", path)
        with self.lock:
            if self.conflicts:
                self.conflicts -= 1
                self._bump(path)
                raise ApiError(409, "the object has been modified")
            current = self.objects[path]
            if body["metadata"].get("resourceVersion") not in (None, current["metadata"]["resourceVersion"]):
                raise ApiError(409, "the object has been modified")
            for part in ("labels", "annotations"):
                merged = {**(current["metadata"].get(part) or {}), **(body["metadata"].get(part) or {})}
                current["metadata"][part] = {k: v for k, v in merged.items() if v is not None}
            if "taints" in body.get("spec", {}):
                current["spec"]["taints"] = body["spec"]["taints"] or []
            self._bump(path)
            return copy.deepcopy(current)

    def create(self, path: str, body: Obj) -> Obj:
        self._check("create", path)
        if path.endswith("/events"):
            self.events.append((path, body))
            return body
        name = f"{path}/{body['metadata']['name']}"
        if name in self.objects:
            raise ApiError(409, "already exists")
        self.objects[name] = {**copy.deepcopy(body), "metadata": {**body["metadata"], "resourceVersion": "1"}}
        return body

    def replace(self, path: str, body: Obj) -> Obj:
        self._check("replace", path)
        if path.endswith("/status"):
            return {**body, "metadata": {**body["metadata"], "resourceVersion": "2"}}
        if body["metadata"]["resourceVersion"] != self.objects[path]["metadata"]["resourceVersion"]:
            raise ApiError(409, "the object has been modified")
        self.objects[path] = copy.deepcopy(body)
        self._bump(path)
        return body

    def _bump(self, path: str) -> None:
        meta = self.objects[path]["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)


def node(api: FakeApi, name: str) -> Obj:
    return api.objects[f"/api/v1/nodes/{name}"]


# ---- isolate and release -------------------------------------------------------------------------------------


def test_isolating_taints_labels_and_annotates_the_node_and_records_a_node_event() -> None:
    api = FakeApi(["n1"])
    by = "team/train/train-worker-1: node n1 isolated: the check found gpu.ecc read 2 (threshold 0)"
    assert isolation.isolate(api, "n1", by, "node n1 isolated: ...", 1000.0, "job-uid/isolate/n1")  # type: ignore[arg-type]
    seen = node(api, "n1")
    assert {"key": isolation.KEY, "value": "true", "effect": "NoSchedule"} in seen["spec"]["taints"]
    assert {"key": "gpu", "value": "a100", "effect": "PreferNoSchedule"} in seen["spec"]["taints"]  # kept
    assert seen["metadata"]["labels"] == {isolation.KEY: "true"}
    # Who, when (for its cool-down) and its first strike.
    recorded = {isolation.BY: by, isolation.AT: "1000", isolation.STRIKES: "1"}
    assert seen["metadata"]["annotations"] == recorded
    ((path, event),) = api.events
    assert path == "/api/v1/namespaces/default/events"
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1"}
    assert (event["type"], event["reason"]) == ("Warning", "NodeIsolated")
    assert isolation.is_isolated(seen)
    # The operator's node cache keeps what it needs to tell (the taint's key and effect).
    assert isolation.is_isolated(project(seen, NODE_FIELDS))
    assert isolation.isolated_nodes(api) == [("n1", by)]  # type: ignore[arg-type]

    # Isolated already: left as it is, no second Event.
    assert not isolation.isolate(api, "n1", "other", "again", 1001.0, "other-key")  # type: ignore[arg-type]
    assert len(api.events) == 1
    assert node(api, "n1")["metadata"]["annotations"] == recorded


def test_a_node_changed_meanwhile_is_read_again_and_isolated() -> None:
    api = FakeApi(["n1"])
    api.conflicts = 2
    assert isolation.isolate(api, "n1", "by", "why", 1000.0, "k")  # type: ignore[arg-type]
    assert isolation.is_isolated(node(api, "n1"))


def test_release_removes_the_taint_label_and_annotation_and_keeps_the_rest() -> None:
    api = FakeApi(["n1", "n2"])
    isolation.isolate(api, "n1", "by", "why", 1000.0, "k")  # type: ignore[arg-type]
    assert isolation.release(api, "n1")  # type: ignore[arg-type]
    seen = node(api, "n1")
    assert seen["spec"]["taints"] == [{"key": "gpu", "value": "a100", "effect": "PreferNoSchedule"}]
    assert seen["metadata"]["labels"] == {}
    assert seen["metadata"]["annotations"] == {}
    assert not isolation.release(api, "n1")  # type: ignore[arg-type]
    assert not isolation.release(api, "n2")  # type: ignore[arg-type]
    assert isolation.isolated_nodes(api) == []  # type: ignore[arg-type]


# ---- a node that cannot be tainted ----------------------------------------------------------------------------


def _cce_job() -> tuple[Obj, Any]:
    obj = yaml.safe_load(CCE_JOB.read_text())
    obj["metadata"].update(uid="job-uid", resourceVersion="1")
    return obj, load_object(obj, "cce").job


def _backend(api: FakeApi, obj: Obj) -> JobBackend:
    pods = Cache(api, "/api/v1/pods", lambda o, n: None)  # type: ignore[arg-type]
    nodes = Cache(api, "/api/v1/nodes", lambda o, n: None)  # type: ignore[arg-type]
    return JobBackend(Shared(api, pods, nodes), AITRAININGJOB, obj)  # type: ignore[arg-type]


def test_a_node_rbac_refuses_to_taint_is_a_failed_action_and_the_batch_goes_on() -> None:
    api = FakeApi(["n1"])
    api.refuse.add(("patch", "nodes"))
    obj, job = _cce_job()
    backend = _backend(api, obj)
    isolate = IsolateNode(
        "job-uid/isolate/n1", node="n1", pod="p", item="gpu.ecc", value=2.0, threshold=0.0, reason="why"
    )
    event = EmitEvent(
        "job-uid/event/1", EventType.WARNING, "NodeIsolated", "node n1 isolated: why", 1000.0, "p"
    )

    applied = backend.apply(job, [isolate, event])

    assert not applied.conflict
    (error,) = backend.observe(job).errors
    assert error.key == isolate.key
    assert not error.transient
    assert "cannot patch resource" in error.message
    assert not isolation.is_isolated(node(api, "n1"))
    # The job's own Events went out: the one of the batch, and why its node is not isolated, in the API's words.
    reasons = {body["reason"]: body for _, body in api.events}
    assert sorted(reasons) == ["NodeIsolated", "NodeNotIsolated"]
    refused = reasons["NodeNotIsolated"]
    assert refused["involvedObject"]["name"] == "p"  # the pod whose check failed, of the job
    assert "cannot patch resource" in refused["message"]
    assert "ClusterRole needs patch on nodes" in refused["message"]
    assert not any(body["involvedObject"]["kind"] == "Node" for _, body in api.events)  # no Node Event


# ---- the pods' wiring -----------------------------------------------------------------------------------------


def _first_pod(settings: manifests.PodSettings) -> Obj:
    _, job = _cce_job()
    actions = reconcile(job, JobStatus(), Observed(), now=1000.0).actions
    launch = next(a for a in actions if isinstance(a, LaunchPod) and a.spec.argv)
    return manifests.pod(AITRAININGJOB, job, launch, settings)


def test_every_pod_learns_its_node_from_the_api_server_and_reads_injected_faults_only_when_asked() -> None:
    plain = _first_pod(manifests.PodSettings())
    container = plain["spec"]["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    assert env[contract.ENV_NODE_NAME]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert contract.ENV_FAULT_INJECT not in env
    assert not any(
        (v.get("configMap") or {}).get("name") == manifests.FAULT_INJECT_CONFIG_MAP
        for v in plain["spec"]["volumes"]
    )

    injected = _first_pod(manifests.PodSettings(fault_injection=True))
    container = injected["spec"]["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    assert env[contract.ENV_FAULT_INJECT] == {
        "name": contract.ENV_FAULT_INJECT,
        "value": manifests.FAULT_INJECT_DIR,
    }
    (volume,) = [
        v
        for v in injected["spec"]["volumes"]
        if "configMap" in v and v["name"] == "trainguard-fault-injection"
    ]
    assert volume["configMap"] == {"name": manifests.FAULT_INJECT_CONFIG_MAP, "optional": True}
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert (mount["mountPath"], mount["readOnly"]) == (manifests.FAULT_INJECT_DIR, True)


# ---- the reasons the agent's final report gives ---------------------------------------------------------------


def _ended(message: str, exit_code: int = 120) -> Obj:
    terminated = {"exitCode": exit_code, "reason": "Error", "message": message}
    return {
        "metadata": {
            "name": "p-worker-0",
            "labels": {
                "trainguard.io/role": "worker",
                "trainguard.io/index": "0",
                "trainguard.io/generation": "1",
            },
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": terminated}}]},
    }


@pytest.mark.parametrize(
    ("report", "reason"),
    [
        ({"event": "exited", "reason": "HardwareFault", "exit_code": 120}, "HardwareFault"),
        ({"event": "exited", "reason": "PreCheckFailed", "exit_code": 120}, "PreCheckFailed"),
        ({"event": "gave-up", "reason": "HardwareFault", "exit_code": 120}, None),  # a check's end is exited
        ({"event": "gave-up", "reason": "Hang", "exit_code": 124}, "Hang"),
        ({"event": "exited", "reason": "Hang", "exit_code": 1}, None),  # only a give-up is a hang
        ({"event": "exited", "reason": "Evicted", "exit_code": 1}, None),  # a pod cannot say it was evicted
        ({"event": "started", "reason": "HardwareFault"}, None),
        ({"event": "exited", "exit_code": 1}, None),
    ],
)
def test_the_reason_of_the_agents_final_report(report: Obj, reason: str | None) -> None:
    seen = observe.observed_pod(_ended(json.dumps(report)))
    assert seen.reason == reason
    assert seen.node == "n1"  # the node the pod was bound to, whatever the message says


@pytest.mark.parametrize("message", ["", "container failed", "{not json", "[1, 2]", '"HardwareFault"'])
def test_a_termination_message_that_is_no_report_gives_no_reason(message: str) -> None:
    assert observe.observed_pod(_ended(message)).reason is None


# ---- the injection aid ------------------------------------------------------------------------------------------


def test_the_injection_configmap_lists_each_nodes_items_and_repair_removes_them() -> None:
    api = FakeApi([])
    assert faultinject.injected(api, "team") == {}  # type: ignore[arg-type]
    faultinject.inject(api, "team", "n1", ("gpu.ecc",))  # type: ignore[arg-type]
    faultinject.inject(api, "team", "n1", ("gpu.ecc", "host.disk"))  # type: ignore[arg-type]
    faultinject.inject(api, "team", "n2", ("gpu.lost",))  # type: ignore[arg-type]
    stored = api.objects[f"/api/v1/namespaces/team/configmaps/{manifests.FAULT_INJECT_CONFIG_MAP}"]
    assert stored["data"] == {"n1": "gpu.ecc\nhost.disk\n", "n2": "gpu.lost\n"}
    assert faultinject.injected(api, "team") == {"n1": ("gpu.ecc", "host.disk"), "n2": ("gpu.lost",)}  # type: ignore[arg-type]
    assert faultinject.repair(api, "team", "n1")  # type: ignore[arg-type]
    assert not faultinject.repair(api, "team", "n1")  # type: ignore[arg-type]
    assert faultinject.injected(api, "team") == {"n2": ("gpu.lost",)}  # type: ignore[arg-type]


def test_the_operator_counts_the_isolated_nodes_as_its_node_watch_sees_them() -> None:
    api = FakeApi(["n1", "n2"])
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    for name in ("n1", "n2"):
        node(api, name)["status"] = ready
    obj, _ = _cce_job()
    shared = _backend(api, obj).shared

    def watched(name: str) -> Obj:
        return project(copy.deepcopy(node(api, name)), NODE_FIELDS)  # what the node cache keeps

    for name in ("n1", "n2"):
        assert shared.node_changed(watched(name), watched(name))
    assert shared.isolated_nodes() == (2, frozenset())
    isolation.isolate(api, "n1", "by", "why", 1000.0, "k")  # type: ignore[arg-type]
    assert shared.node_changed(watched("n1"), watched("n1"))
    assert shared.isolated_nodes() == (2, frozenset({"n1"}))
    assert not shared.node_changed(watched("n1"), watched("n1"))  # nothing new
    isolation.release(api, "n1")  # type: ignore[arg-type]
    assert shared.node_changed(watched("n1"), watched("n1"))
    assert shared.isolated_nodes() == (2, frozenset())
