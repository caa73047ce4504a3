"""``benchmarks/_kwok.py``: kwok's pod-complete Stage narrowed to Kubernetes' own Jobs, so that Volcano's Job
(also of kind ``Job``) keeps its pods running on the benchmarks' kwok cluster; kwok nodes that say what the real
nodes say of their kubelet and runtime."""

from __future__ import annotations

from typing import Any

from benchmarks._kwok import BATCH_JOBS_ONLY, batch_jobs_only, kwok_node, real_node_info

from trainguard.backends.k8s.delivery import node_mounts_image_volumes


def stage() -> dict[str, Any]:
    owner = {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]}
    return {
        "metadata": {"name": "pod-complete", "resourceVersion": "42"},
        "spec": {"selector": {"matchExpressions": [owner]}, "next": {"delete": False}},
    }


def test_narrowed_to_batch_jobs_once() -> None:
    original = stage()
    narrowed = batch_jobs_only(original)
    assert narrowed["spec"]["selector"]["matchExpressions"][-1] == BATCH_JOBS_ONLY
    assert len(narrowed["spec"]["selector"]["matchExpressions"]) == 2
    assert narrowed["metadata"]["resourceVersion"] == "42"  # a replace at the version read
    assert narrowed["spec"]["next"] == original["spec"]["next"]
    assert len(original["spec"]["selector"]["matchExpressions"]) == 1  # what was read is left as it was
    assert batch_jobs_only(narrowed) == narrowed


def test_nodes_like_the_real_ones_say_what_those_say_and_mount_image_volumes() -> None:
    info = real_node_info()
    assert info["kubeletVersion"].startswith("v1.")
    assert info["containerRuntimeVersion"].startswith("containerd://")
    node = kwok_node("n1", 2, like_real=True)
    assert node["status"]["nodeInfo"] == info
    assert node_mounts_image_volumes(node)
    # A plain kwok node says kwok's own versions (kwok fills them in): no image volumes.
    assert "nodeInfo" not in kwok_node("n1", 2)["status"]
    assert not node_mounts_image_volumes(kwok_node("n1", 2))
