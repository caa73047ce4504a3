"""The test cluster works end to end: a kwok node becomes Ready, and a pod the scheduler places on it runs; it
has room for the Services of a big benchmark."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.k8s.cluster import KubeCluster

pytestmark = pytest.mark.k8s


def kwok_node(name: str) -> str:
    # kwok takes over nodes that carry its annotation; its node stages then report them Ready.
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            },
        }
    )


def pod_on(node: str, name: str, namespace: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [{"name": "main", "image": "example.invalid/trainer:1"}],
            },
        }
    )


def test_a_pod_scheduled_to_a_kwok_node_runs(kube_cluster: KubeCluster) -> None:
    suffix = uuid.uuid4().hex[:8]
    node, namespace = f"kwok-node-{suffix}", f"smoke-{suffix}"
    kube_cluster.kubectl("apply", "-f", "-", input=kwok_node(node))
    kube_cluster.kubectl("create", "namespace", namespace)
    try:
        kube_cluster.kubectl("wait", "--for=condition=Ready", f"node/{node}", "--timeout=60s")

        kube_cluster.kubectl("apply", "-f", "-", input=pod_on(node, "worker", namespace))
        kube_cluster.kubectl(
            "wait", "-n", namespace, "--for=jsonpath={.status.phase}=Running", "pod/worker", "--timeout=60s"
        )

        pod = json.loads(kube_cluster.kubectl("get", "-n", namespace, "pod/worker", "-o", "json"))
        assert pod["spec"]["nodeName"] == node
        assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"

        # The tests' reads through the API client say what kubectl says.
        assert kube_cluster.get_json("get", "-n", namespace, "pod/worker") == pod
        listed = json.loads(kube_cluster.kubectl("get", "pods", "-n", namespace, "-l", "x!=y", "-o", "json"))
        read = kube_cluster.get_json("get", "pods", "-n", namespace, "-l", "x!=y")
        assert [item["metadata"]["name"] for item in read["items"]] == ["worker"]
        assert read["items"] == listed["items"]
        assert kube_cluster.get_json("get", "node", node)["metadata"]["name"] == node
    finally:
        kube_cluster.kubectl("delete", "namespace", namespace, "--wait=false")
        kube_cluster.kubectl("delete", "node", node, "--wait=false")


def test_the_service_range_holds_more_than_the_api_servers_default(kube_cluster: KubeCluster) -> None:
    # The API server's default, 10.0.0.0/24, ran out at 254 Services in the peers benchmark (500 jobs).
    default = json.loads(kube_cluster.kubectl("get", "servicecidr", "kubernetes", "-o", "json"))
    assert default["spec"]["cidrs"] == ["10.0.0.0/16"], (
        "a cluster started with an earlier scripts/k8s/kwokctl.yaml is still up: "
        "scripts/k8s-testcluster down, and run the tests again"
    )
    service = json.loads(kube_cluster.kubectl("get", "-n", "default", "service/kubernetes", "-o", "json"))
    assert service["spec"]["clusterIP"] == "10.0.0.1"
