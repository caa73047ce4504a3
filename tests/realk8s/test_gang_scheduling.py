"""Gang scheduling on real nodes, side by side with the default scheduler: a job that cannot fit as a whole.

The two real nodes advertise 8 ``baidu.com/v100_32g_cgpu`` each; a plain pod holds the 8 of one node. A job of
2 trainers asking 8 each (``minReplicas: 2``) then fits only in part. Placed by the default scheduler, one
trainer runs and the other stays Pending, holding its card for nothing; placed by Volcano (the operator's
PodGroup: minMember 2, minResources 16 cards), no trainer is bound at all. When the plain pod goes (capacity
returns), Volcano starts both. The jobs are CCE's AITrainingJob cut to its trainers, on a Debian image."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from tests.realk8s.real import EXAMPLES, NO_PYTHON, RealCluster, wait_for

pytestmark = pytest.mark.timeout(600)

CCE_JOB = yaml.safe_load((EXAMPLES.parent / "jobs" / "cce-horovod-elastic.yaml").read_text())
CARDS = "baidu.com/v100_32g_cgpu"
ALL_OF_A_NODE = {"requests": {CARDS: "8"}, "limits": {CARDS: "8"}}
SLEEP = ["sleep", "infinity"]


def _job(name: str, scheduler: str | None) -> dict[str, Any]:
    """CCE's job cut to 2 trainers that each ask for a whole node's cards, all of them needed to run."""
    job = copy.deepcopy(CCE_JOB)
    job["metadata"]["name"] = name
    for key in ("plugin", "frameworkType"):
        del job["spec"][key]
    trainer = job["spec"]["replicaSpecs"]["trainer"]
    job["spec"]["replicaSpecs"] = {"trainer": trainer}
    trainer.update(replicas=2, minReplicas=2, maxReplicas=2)
    pod = trainer["template"]["spec"]
    pod["terminationGracePeriodSeconds"] = 1
    if scheduler is None:
        del pod["schedulerName"]
    (container,) = pod["containers"]
    container.update(image=NO_PYTHON, imagePullPolicy="IfNotPresent", command=SLEEP, resources=ALL_OF_A_NODE)
    return job  # type: ignore[no-any-return]


def _blocker() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "holds-a-node", "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": NO_PYTHON, "command": SLEEP, "resources": ALL_OF_A_NODE}
            ],
        },
    }


def _trainers(cluster: RealCluster, job: str) -> list[dict[str, Any]]:
    return cluster.replica_pods(job)


def _placed(cluster: RealCluster, job: str) -> tuple[int, int]:
    """(trainers Running, trainers Pending that the scheduler found no room for)."""
    pods = _trainers(cluster, job)
    running = sum(p["status"].get("phase") == "Running" for p in pods)
    unschedulable = sum(
        any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in p["status"].get("conditions", [])
        )
        for p in pods
    )
    return running, unschedulable


def _gang_refused(cluster: RealCluster, job: str) -> dict[str, Any] | None:
    """The PodGroup's condition once Volcano has looked at it and found the cluster too small for it."""
    found = cluster.kubectl_result("get", "podgroup", job, "-o", "json")
    status = (json.loads(found).get("status") or {}) if found else {}
    refused = [c for c in status.get("conditions", []) if c.get("type") == "Unschedulable"]
    return refused[-1] if refused and status.get("phase") == "Pending" else None


def test_a_job_that_cannot_fit_as_a_whole_starts_no_pod_until_capacity_returns(operator: RealCluster) -> None:
    cluster = operator
    cluster.apply(_blocker())
    try:
        wait_for("a plain pod holding one node's cards", lambda: cluster.pod("holds-a-node")["status"].get("phase") == "Running", 120, every=2)  # fmt: skip

        # The default scheduler: one trainer runs, the other waits, its card held for nothing.
        cluster.apply(_job("gang-default", None))
        wait_for("one trainer Running, one unschedulable", lambda: _placed(cluster, "gang-default") == (1, 1), 180, every=2)  # fmt: skip
        assert not cluster.kubectl_result("get", "podgroup", "gang-default", "-o", "name")
        cluster.kubectl("delete", "aitrainingjob", "gang-default", "--wait=true", "--timeout=120s")
        wait_for("gang-default's pods gone", lambda: not _trainers(cluster, "gang-default"), 120, every=2)

        # Volcano: the whole gang or nothing.
        cluster.apply(_job("gang-volcano", "volcano"))
        refused = wait_for(
            "Volcano to refuse the gang", lambda: _gang_refused(cluster, "gang-volcano"), 120, every=2
        )
        print(f"\nPodGroup gang-volcano: {refused.get('reason')}: {refused.get('message')}")
        pods = _trainers(cluster, "gang-volcano")
        assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
        assert [p["spec"].get("nodeName") for p in pods] == [None, None]

        # Capacity returns: both start.
        cluster.kubectl("delete", "pod", "holds-a-node", "--wait=true", "--timeout=60s")
        wait_for("both trainers Running", lambda: _placed(cluster, "gang-volcano")[0] == 2, 180, every=2)
        nodes = {p["spec"]["nodeName"] for p in _trainers(cluster, "gang-volcano")}
        assert len(nodes) == 2  # a whole node's cards each
    finally:
        cluster.kubectl_result("delete", "pod", "holds-a-node", "--ignore-not-found", "--wait=false")
        for job in ("gang-default", "gang-volcano"):
            cluster.kubectl_result(
                "delete", "aitrainingjob", job, "--ignore-not-found", "--wait=true", "--timeout=120s"
            )
