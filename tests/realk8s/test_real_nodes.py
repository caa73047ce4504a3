"""The real-node cluster itself: stock images run in real containers, pods on two nodes find each other by
Service name through CoreDNS and reach the API server through kube-proxy, and a node whose kubelet stops goes
NotReady while the other keeps running."""

from __future__ import annotations

from typing import Any

import pytest

from tests.realk8s.real import STOCK_PYTORCH, RealCluster, wait_for

pytestmark = pytest.mark.timeout(600)


def pod_manifest(
    name: str, node: str, command: list[str], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": STOCK_PYTORCH, "imagePullPolicy": "Always", "command": command}
            ],
        },
    }


def phase(cluster: RealCluster, name: str) -> str:
    return str(cluster.pod(name)["status"].get("phase", ""))


def test_two_real_nodes_are_ready(real_cluster: RealCluster) -> None:
    nodes = real_cluster.real_nodes()
    assert len(nodes) == 2
    assert all(real_cluster.node_ready(n) for n in nodes)


def test_a_stock_pytorch_image_runs_in_a_real_container(real_cluster: RealCluster) -> None:
    node = real_cluster.real_nodes()[0]
    command = ["python3", "-c", "import torch; print('torch', torch.__version__, torch.ones(2).sum().item())"]
    real_cluster.apply(pod_manifest("stock-torch", node, command))
    try:
        # The first pull of the image (gigabytes) into the node's containerd is part of this wait.
        wait_for(
            "pod stock-torch to finish",
            lambda: phase(real_cluster, "stock-torch") in ("Succeeded", "Failed"),
            420,
        )
        assert phase(real_cluster, "stock-torch") == "Succeeded", real_cluster.logs("stock-torch")
        words = real_cluster.logs("stock-torch").split()
        assert words[0] == "torch", words
        assert words[1].startswith("2.13.0"), words
        assert words[2] == "2.0", words
        # The tests read logs through the API (KubeCluster.logs): what kubectl prints, timestamps and all.
        assert real_cluster.logs("stock-torch") == real_cluster.kubectl("logs", "stock-torch")
        stamped = real_cluster.logs("stock-torch", timestamps=True)
        assert stamped == real_cluster.kubectl("logs", "--timestamps", "stock-torch")
        assert stamped.split()[1:] == words, stamped
        assert real_cluster.logs("no-such-pod") == ""
        status = real_cluster.pod("stock-torch")["status"]["containerStatuses"][0]
        assert status["state"]["terminated"]["exitCode"] == 0
        assert status["imageID"], "a real container reports the digest of the image it ran"
        # The same log, in the file its node's kubelet keeps (where a test reads it when kubectl cannot).
        files = real_cluster.pod_log_files("stock-torch")
        assert files, "no log file of stock-torch on its node"
        assert "stdout F torch 2.13.0" in files[-1].read_text(), files
    finally:
        real_cluster.kubectl("delete", "pod", "stock-torch", "--wait=false")


SERVER = "import http.server as h; h.HTTPServer(('', 8080), h.SimpleHTTPRequestHandler).serve_forever()"
CLIENT = """
import socket, time, urllib.request
addr = socket.gethostbyname('kubernetes.default.svc.cluster.local')
socket.create_connection((addr, 443), timeout=5).close()
deadline = time.time() + 60
while True:
    try:
        body = urllib.request.urlopen('http://web-0.web.default.svc:8080/', timeout=3).read()
        break
    except OSError:
        if time.time() > deadline:
            raise
        time.sleep(1)
print('api', addr, 'web', len(body))
"""


def test_pods_on_two_nodes_find_each_other_through_dns_and_services(real_cluster: RealCluster) -> None:
    first, second = real_cluster.real_nodes()
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 8080}]},
    }
    server = pod_manifest("web-0", first, ["python3", "-c", SERVER], labels={"app": "web"})
    server["spec"].update(hostname="web-0", subdomain="web")
    try:
        real_cluster.apply(service)
        real_cluster.apply(server)
        real_cluster.apply(pod_manifest("client", second, ["python3", "-c", CLIENT]))
        wait_for(
            "pod client to finish", lambda: phase(real_cluster, "client") in ("Succeeded", "Failed"), 300
        )
        logs = real_cluster.logs("client")
        assert phase(real_cluster, "client") == "Succeeded", logs
        # The kubernetes Service's address, reached through kube-proxy; the server answered from the other node.
        assert logs.startswith("api 10.0.0.1 web "), logs
        assert real_cluster.pod("web-0")["spec"]["nodeName"] != real_cluster.pod("client")["spec"]["nodeName"]
    finally:
        real_cluster.kubectl("delete", "pod", "web-0", "client", "--wait=false", "--ignore-not-found")
        real_cluster.kubectl("delete", "service", "web", "--ignore-not-found")


def test_a_node_whose_kubelet_stops_goes_not_ready_and_comes_back(real_cluster: RealCluster) -> None:
    first, second = real_cluster.real_nodes()
    real_cluster.stop_kubelet(second)
    try:
        # The controller manager's grace period in this cluster is 20 s.
        wait_for(f"{second} to go NotReady", lambda: not real_cluster.node_ready(second), 90)
        assert real_cluster.node_ready(first)
    finally:
        real_cluster.start_kubelet(second)
    wait_for(f"{second} to be Ready again", lambda: real_cluster.node_ready(second), 90)
