"""The fault tolerance check on real nodes, with the operator installed by the chart and its fault-injection aid
on (``faultInjection=true``, a test aid): ``gpu.ecc`` injected on one node before a job of 2 pods starts, the
agent's pre-check in the pod there fails (its command never runs), the node is tainted and labelled, a Node
Event names the job and the pod, the pod runs again on the other node (its bandwidth probe to the other pod
measured on real links) and the job succeeds;
``trainguard node release`` lifts the taint.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.k8s.operator_harness import TRAINGUARD
from tests.realk8s.real import CHART, NAMESPACE, RealCluster, helm, wait_for
from trainguard.backends.k8s import delivery, isolation, manifests
from trainguard.pod import contract

pytestmark = pytest.mark.timeout(900)

JOB = "check-isolate"
DONE = "trained on a healthy node"


def _job() -> dict[str, Any]:
    spread = {
        "weight": 100,
        "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"trainguard.io/job": JOB}},
        },
    }
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": JOB, "namespace": "default"},
        "spec": {
            "frameworkType": "generic",
            "faultCheck": {"enabled": True},
            "replicaSpecs": {
                "worker": {
                    "replicas": 2,
                    "restartPolicy": "OnFailure",
                    "restartLimit": 2,
                    "template": {
                        "spec": {
                            # One pod a node where both fit (the first placement meets the faulty node); after
                            # the isolation both run on the other. Each trains 30 s: the pod issued again finds
                            # the other still there for its bandwidth probe.
                            "affinity": {
                                "podAntiAffinity": {
                                    "preferredDuringSchedulingIgnoredDuringExecution": [spread]
                                }
                            },
                            "terminationGracePeriodSeconds": 5,
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "python:3.11-slim",
                                    "command": [
                                        "python3",
                                        "-c",
                                        f"import time; time.sleep(30); print({DONE!r})",
                                    ],
                                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                                }
                            ],
                        }
                    },
                }
            },
        },
    }


@pytest.fixture
def injecting(operator: RealCluster) -> Iterator[RealCluster]:
    """The operator with its fault-injection aid on (a chart value), and off again afterwards with nothing
    left injected or isolated. Meanwhile it copies the agent into the pods with an init container (the chart's
    other delivery; the nodes here mount image volumes, which the other tests' pods get), so that both
    deliveries run on real nodes."""
    helm(operator, "upgrade", "trainguard", str(CHART), "-n", NAMESPACE, "--reuse-values",
         "--set", "faultInjection=true", "--set", "agentDelivery=init-container",
         "--wait", "--timeout", "300s")  # fmt: skip
    # helm's --wait ends when the new replicas are ready, while an old one may still lead for its grace period
    # and dress the job's pods without the aid (their checks then read the machine): the job comes once the
    # old replicas are gone, and a new one leads.
    wait_for("the operator's replicas of before the upgrade gone", lambda: _only_current(operator), 180)
    try:
        yield operator
    finally:
        operator.kubectl("delete", "trainingjob", JOB, "--ignore-not-found", "--wait=true", timeout=120)
        operator.kubectl("delete", "configmap", manifests.FAULT_INJECT_CONFIG_MAP, "--ignore-not-found")
        for node in operator.real_nodes():
            trainguard(operator, "node", "release", node)
        helm(operator, "upgrade", "trainguard", str(CHART), "-n", NAMESPACE, "--reuse-values",
             "--set", "faultInjection=false", "--set", "agentDelivery=auto",
             "--wait", "--timeout", "300s")  # fmt: skip
        # helm's --wait ends when the new replicas are ready; the old ones end within their grace period after.
        # The tests after this one find the operator as the chart leaves it: its two replicas, no third.
        wait_for("the operator's replicas of before the upgrade gone", lambda: _only_current(operator), 180)


def _only_current(cluster: RealCluster) -> bool:
    selector = "app.kubernetes.io/name=trainguard-operator"
    pods = cluster.json("get", "pods", "-n", NAMESPACE, "-l", selector)["items"]
    return len(pods) == 2 and not any(pod["metadata"].get("deletionTimestamp") for pod in pods)


def trainguard(cluster: RealCluster, *args: str) -> str:
    done = subprocess.run(
        [str(TRAINGUARD), *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _explain(cluster: RealCluster) -> str:
    status = cluster.json("get", "trainingjob", JOB).get("status") or {}
    pods = cluster.replica_pods(JOB)
    lines = [f"job {JOB}: {status.get('phase')}, history {status.get('history', [])[-6:]}"]
    for pod in pods:
        state = [c.get("state") for c in pod["status"].get("containerStatuses") or []]
        env = {e["name"] for c in pod["spec"]["containers"] for e in c.get("env") or ()}
        aid = "with" if contract.ENV_FAULT_INJECT in env else "WITHOUT"
        lines.append(
            f"{pod['metadata']['name']} on {pod['spec'].get('nodeName')} ({aid} the injection aid): "
            f"{pod['status'].get('phase')} {state}"
        )
    return "\n".join(lines)


def test_a_node_whose_pre_check_fails_is_tainted_the_job_runs_on_the_other_and_succeeds(
    injecting: RealCluster,
) -> None:
    cluster = injecting
    bad, good = cluster.real_nodes()
    said = trainguard(cluster, "chaos", "hardware-fault", bad, "--item", "gpu.ecc", "-n", "default")
    assert bad in said
    cluster.apply(_job())

    def isolated() -> dict[str, Any] | None:
        node = cluster.json("get", "node", bad)
        return node if isolation.is_isolated(node) else None

    node = wait_for(f"node {bad} isolated", isolated, 300, every=2, explain=lambda: _explain(cluster))
    assert node["metadata"]["labels"][isolation.KEY] == "true"
    by = node["metadata"]["annotations"][isolation.BY]
    assert by.startswith(f"default/{JOB}/{JOB}-worker-")
    assert "gpu.ecc" in by
    events = cluster.json("get", "events", "-n", "default", "--field-selector", f"involvedObject.name={bad}")[
        "items"
    ]
    (event,) = [e for e in events if e["reason"] == "NodeIsolated"]
    assert JOB in event["message"]
    assert f"{JOB}-worker-" in event["message"]
    assert bad in trainguard(cluster, "node", "list")

    status = wait_for(
        f"job {JOB} to succeed",
        lambda: (lambda st: st if st.get("phase") in ("Succeeded", "Failed") else None)(
            cluster.json("get", "trainingjob", JOB).get("status") or {}
        ),
        420,
        every=2,
        explain=lambda: _explain(cluster),
    )
    assert status["phase"] == "Succeeded", _explain(cluster)
    pods = cluster.replica_pods(JOB)
    assert {p["spec"]["nodeName"] for p in pods} == {good}, _explain(cluster)
    for pod in pods:
        assert DONE in cluster.logs(pod["metadata"]["name"]), _explain(cluster)
        # The agent was copied in by the init container (the fixture's delivery), and ran.
        assert [c["name"] for c in pod["spec"]["initContainers"]] == [delivery.INSTALL_CONTAINER]
    checked = status["faultCheck"]
    assert checked["isolated"] == [bad]
    assert checked["reissues"] >= 1
    # The bandwidth probe between the pods, each to the other behind the job's Service (real veths): the pod
    # issued again, on the good node, found the first one there.
    links = {link["pod"]: link for link in checked.get("links") or ()}
    assert links, checked
    for link in links.values():
        assert link["mbps"] > 25.0, links
    (entry,) = [e for e in status["history"] if e.get("kind") == "isolate"]
    assert entry["node"] == bad
    assert entry["check"]["phase"] == "pre"
    assert entry["check"]["failed"][0]["name"] == "gpu.ecc"

    said = trainguard(cluster, "node", "release", bad)
    assert "released" in said
    node = cluster.json("get", "node", bad)
    assert not isolation.is_isolated(node)
    assert isolation.KEY not in (node["metadata"].get("labels") or {})
