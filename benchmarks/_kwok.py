"""kwok nodes and kwok's chaos patches, for what runs on the kwok test cluster (``scripts/k8s-testcluster``): the
operator's tests (``tests/k8s``) and the benchmarks ``k8s_scale.py`` and ``k8s_peers.py``. Each node takes
``pods`` pods and has the GPU resources of CCE's example.

The benchmarks import it as ``_kwok`` (their own directory is on the path), the tests as ``benchmarks._kwok``.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

_SCRIPTS_K8S = Path(__file__).resolve().parents[1] / "scripts" / "k8s"

#: Extended resources that the trainers of CCE's AITrainingJob example request.
CCE_TRAINER_GPU = {
    "baidu.com/v100_32g_cgpu": "8",
    "baidu.com/v100_32g_cgpu_core": "800",
    "baidu.com/v100_32g_cgpu_memory": "256",
}
#: kwok's chaos Stages act on the objects that carry their label: a node that goes NotReady, a running pod whose
#: containers end with the exit code its annotation gives.
NOT_READY_LABEL = "node-not-ready.stage.kwok.x-k8s.io"
EXIT_STAGE = "pod-container-running-failed.stage.kwok.x-k8s.io"


def not_ready_patch() -> dict[str, Any]:
    """A merge patch that makes kwok take a node NotReady (0.1 s later)."""
    return {
        "metadata": {"labels": {NOT_READY_LABEL: "true"}, "annotations": {f"{NOT_READY_LABEL}/delay": "100"}}
    }


def exit_code_patch(code: int) -> dict[str, Any]:
    """A merge patch that makes kwok end a running pod's containers with ``code`` (0.1 s later)."""
    annotations = {f"{EXIT_STAGE}/exit-code": str(code), f"{EXIT_STAGE}/delay": "100"}
    return {"metadata": {"labels": {EXIT_STAGE: "true"}, "annotations": annotations}}


def check_failed_patch(summary: dict[str, Any], final: dict[str, Any], exit_code: int) -> dict[str, Any]:
    """A merge patch that makes a running pod end as its agent ends it after a failed fault tolerance check:
    the agent's summary in the pod's ``trainguard.io/agent-report`` annotation (where the operator puts what
    the agent POSTs), and kwok's chaos Stage ending the container with ``exit_code`` and the agent's final
    report (``final``) as its termination message (0.1 s later). kwok renders the message into YAML: it goes
    as a double-quoted scalar, which a JSON string is."""
    patch = exit_code_patch(exit_code)
    patch["metadata"]["annotations"].update(
        {
            f"{EXIT_STAGE}/message": json.dumps(json.dumps(final, separators=(",", ":"))),
            f"{EXIT_STAGE}/reason": "Error",
            "trainguard.io/agent-report": json.dumps(summary, separators=(",", ":")),
        }
    )
    return patch


@lru_cache(maxsize=1)
def real_node_info() -> dict[str, str]:
    """What the test cluster's real nodes say of their kubelet and runtime (``status.nodeInfo``), read from the
    modules their builds pin (``scripts/k8s/go.mod``, ``scripts/k8s/containerd/go.mod``): kwok nodes that stand in
    for them say the same (kwok keeps a node's own ``nodeInfo``), so that what an operator reads of its nodes is
    what it reads on real ones."""
    kubernetes = re.search(r"k8s\.io/kubernetes (v[0-9.]+)", (_SCRIPTS_K8S / "go.mod").read_text())
    containerd = re.search(
        r"github\.com/containerd/containerd/v2 v([0-9.]+)",
        (_SCRIPTS_K8S / "containerd" / "go.mod").read_text(),
    )
    if kubernetes is None or containerd is None:
        raise RuntimeError(f"{_SCRIPTS_K8S}: no k8s.io/kubernetes or containerd/v2 version pinned in go.mod")
    return {
        "kubeletVersion": kubernetes.group(1),
        "containerRuntimeVersion": f"containerd://{containerd.group(1)}",
    }


def kwok_node(
    name: str, pods: int = 1, group: str = "trainguard-test", like_real: bool = False
) -> dict[str, Any]:
    """A kwok node taking ``pods`` pods; ``like_real``: its status says the kubelet and runtime of the test
    cluster's real nodes (``real_node_info``), else kwok's own (``kwok-<version>``)."""
    capacity = {"cpu": "32", "memory": "256Gi", "pods": str(pods), **CCE_TRAINER_GPU}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            # kwok takes over nodes with this annotation; its Stages then drive them and their pods.
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": name, "type": "kwok", "trainguard.io/test-nodes": group},
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            **({"nodeInfo": real_node_info()} if like_real else {}),
        },
    }


def node_list(names: list[str], pods: int = 1, group: str = "trainguard-test") -> str:
    return json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [kwok_node(n, pods, group) for n in names]}
    )


#: kwok's Stage that ends the pods of a Job (as a batch Job's pods end): it matches any owner of kind Job, Volcano's
#: (batch.volcano.sh) too, whose pods would then all succeed at once.
POD_COMPLETE_STAGE = "/apis/kwok.x-k8s.io/v1alpha1/stages/pod-complete"
BATCH_JOBS_ONLY = {"key": ".metadata.ownerReferences.[].apiVersion", "operator": "In", "values": ["batch/v1"]}


def batch_jobs_only(stage: dict[str, Any]) -> dict[str, Any]:
    """kwok's pod-complete Stage narrowed to the pods of Kubernetes' own Jobs (batch/v1), as read (with its
    resourceVersion), for a replace; unchanged if it is narrowed already."""
    expressions = stage["spec"]["selector"]["matchExpressions"]
    if BATCH_JOBS_ONLY in expressions:
        return stage
    selector = {**stage["spec"]["selector"], "matchExpressions": [*expressions, BATCH_JOBS_ONLY]}
    return {**stage, "spec": {**stage["spec"], "selector": selector}}
