"""The operator installed as users install it, on real nodes: ``helm install`` of the chart with its defaults
(plus ``pytorchjobs=true``) runs two replicas from the operator's image, pulled from the cluster's registry,
one of which leads; its metrics are scraped through its Service; a Kubeflow PyTorchJob on the stock PyTorch
image (torch and nothing of trainguard) trains to Succeeded with the agent delivered into its pods; a job whose
image has no python3 runs as written, with a Warning Event and the AgentUnavailable condition."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.realk8s.real import EXAMPLES, NAMESPACE, NO_PYTHON, STOCK_PYTORCH, RealCluster, wait_for

pytestmark = pytest.mark.timeout(900)


def _operator_pods(cluster: RealCluster) -> list[dict[str, Any]]:
    selector = "app.kubernetes.io/name=trainguard-operator"
    return list(cluster.json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"])


def test_the_chart_runs_two_replicas_from_the_operators_image_one_of_them_leading(
    operator: RealCluster,
) -> None:
    pods = _operator_pods(operator)
    assert len(pods) == 2
    assert all(p["status"]["phase"] == "Running" for p in pods)
    images = {p["status"]["containerStatuses"][0]["image"] for p in pods}
    assert images == {"ghcr.io/trainguard/operator:0.1.0"}
    names = {p["metadata"]["name"] for p in pods}
    lease = wait_for(
        "the operator's Lease to be held",
        lambda: operator.json("get", "lease", "trainguard-operator", "-n", NAMESPACE)["spec"].get(
            "holderIdentity"
        ),
        60,
    )
    assert lease in names
    for crd in (
        "trainingjobs.trainguard.io",
        "aitrainingjobs.kongming.cce.baiudbce.com",
        "pytorchjobs.kubeflow.org",
    ):
        operator.kubectl("get", "crd", crd)


SCRAPE = """
import sys, time, urllib.request
url = 'http://trainguard-operator-metrics.trainguard-system.svc:8080/metrics'
deadline = time.time() + 60
while True:
    try:
        sys.stdout.write(urllib.request.urlopen(url, timeout=5).read().decode())
        break
    except OSError:
        if time.time() > deadline:
            raise
        time.sleep(1)
"""


def test_the_metrics_are_scraped_through_the_service(operator: RealCluster) -> None:
    node = operator.real_nodes()[0]
    scraper = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "scrape-metrics", "namespace": "default"},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": "python:3.11-slim", "command": ["python3", "-c", SCRAPE]}
            ],
        },
    }
    operator.apply(scraper)
    try:
        wait_for(
            "the scraper to finish",
            lambda: operator.pod("scrape-metrics")["status"].get("phase") in ("Succeeded", "Failed"),
            180,
        )
        text = operator.logs("scrape-metrics")
        assert operator.pod("scrape-metrics")["status"]["phase"] == "Succeeded", text
        assert "trainguard_" in text
    finally:
        operator.kubectl("delete", "pod", "scrape-metrics", "--wait=false")


def _job_status(cluster: RealCluster, kind: str, name: str) -> dict[str, Any]:
    return dict(cluster.json("get", kind, name).get("status") or {})


def test_a_pytorchjob_on_the_stock_pytorch_image_trains_to_succeeded(operator: RealCluster) -> None:
    operator.kubectl("create", "configmap", "train-elastic", f"--from-file={EXAMPLES / 'train_elastic.py'}")
    operator.kubectl("apply", "-f", str(EXAMPLES / "pytorchjob-stock-image.yaml"))
    try:
        wait_for(
            "the PyTorchJob to succeed",
            lambda: (
                _job_status(operator, "pytorchjob", "stock-elastic").get("phase") in ("Succeeded", "Failed")
            ),
            600,
            every=2,
        )
        status = _job_status(operator, "pytorchjob", "stock-elastic")
        worker = operator.pod("stock-elastic-worker-0")
        # Rank 0 prints the steps; which pod holds it is the rendezvous' choice.
        logs = "\n".join(operator.logs(f"stock-elastic-worker-{i}") for i in range(3))
        assert status["phase"] == "Succeeded", (status.get("message"), logs[-3000:])
        # The stock image ran the agent, delivered: these nodes (kubelet 1.36, containerd 2.1) mount image volumes,
        # so the agent's image (a few MB) is mounted at /trainguard and no container of ours runs; the entry found
        # the image's python3. The agent reported the command's start to the operator. And rank 0 trained every step.
        assert not worker["spec"].get("initContainers")
        (agent,) = [v for v in worker["spec"]["volumes"] if v["name"] == "trainguard-agent"]
        assert agent["image"]["reference"] == agent_image(operator) == "ghcr.io/trainguard/agent:0.1.0"
        # ... an image of the entry and the agent's modules alone, as the node that pulled it says.
        node = operator.json("get", "node", worker["spec"]["nodeName"])
        (size,) = [
            i["sizeBytes"] for i in node["status"]["images"] if agent["image"]["reference"] in i["names"]
        ]
        assert size < 20_000_000, size
        summary = json.loads(worker["metadata"]["annotations"]["trainguard.io/agent-report"])
        assert summary["attempt"] >= 1
        assert summary.get("agentMissing") is None
        assert worker["spec"]["containers"][0]["image"] == STOCK_PYTORCH
        # min 2, max 3: a third worker still pulling the image may miss the first round.
        assert re.search(r"step 40/40 world [23] ", logs), logs[-3000:]
        assert not [c for c in status.get("conditions", []) if c["type"] == "AgentUnavailable"]
    finally:
        operator.kubectl("delete", "pytorchjob", "stock-elastic", "--wait=false")
        operator.kubectl("delete", "configmap", "train-elastic")


def agent_image(cluster: RealCluster) -> str:
    """The image the chart gave the operator for the pods' agent (``--agent-image``)."""
    deployment = cluster.json("get", "deployment", "-n", NAMESPACE, "trainguard-operator")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    (image,) = [arg.split("=", 1)[1] for arg in args if arg.startswith("--agent-image=")]
    return str(image)


def _no_python_job() -> dict[str, Any]:
    command = ["sh", "-c", "echo ran as written; sleep 3"]
    container = {"name": "main", "image": NO_PYTHON, "command": command}
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "no-python", "namespace": "default"},
        "spec": {
            "replicaSpecs": {
                "worker": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {"spec": {"containers": [container]}},
                }
            }
        },
    }


def test_an_image_without_python_runs_its_command_as_written_with_a_warning(operator: RealCluster) -> None:
    operator.apply(_no_python_job())
    try:
        wait_for(
            "the job without python3 to end",
            lambda: _job_status(operator, "trainingjob", "no-python").get("phase") in ("Succeeded", "Failed"),
            300,
            every=2,
        )
        status = _job_status(operator, "trainingjob", "no-python")
        assert status["phase"] == "Succeeded", status.get("message")
        logs = operator.logs("no-python-worker-0").splitlines()
        # The entry says so (on stderr) and the command ran (on stdout): the container's log interleaves the two
        # streams as their readers were scheduled, so either may come first on a busy machine.
        (said,) = [
            line for line in logs if "running the command as written, without trainguard's agent" in line
        ]
        assert sorted(logs) == sorted([said, "ran as written"]), logs
        (condition,) = [c for c in status["conditions"] if c["type"] == "AgentUnavailable"]
        assert condition["status"] == "True"
        assert "pods [no-python-worker-0]: the image has no python3" in condition["message"]
        events = operator.json("get", "events", "--field-selector", "involvedObject.name=no-python-worker-0")
        warnings = [e for e in events["items"] if e["reason"] == "AgentUnavailable"]
        assert len(warnings) == 1
        assert warnings[0]["type"] == "Warning"
        assert "no hang detection, no restart in place" in warnings[0]["message"]
    finally:
        operator.kubectl("delete", "trainingjob", "no-python", "--wait=false")
