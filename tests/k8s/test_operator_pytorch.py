"""A Kubeflow PyTorchJob on a real control plane: the worker pods run trainguard's agent around torchrun's
elastic agent in one c10d rendezvous, whose store runs in a pod of its own behind the job's ``<job>-rdzv``
Service; the operator keeps that pod (recreated when deleted, with no fault for the job) and removes it when
the job's pods are gone. kwok runs no containers: the commands are checked, not executed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import Scenario, pod_names
from trainguard.api.crd import pytorchjob_crd
from trainguard.backends.k8s.manifests import ANNOTATION_NUDGE as ANNOTATION
from trainguard.controller.nudges import NUDGE_AFTER_SECONDS

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

Obj = dict[str, Any]
JOB = "elastic"
WORKERS = [f"{JOB}-worker-0", f"{JOB}-worker-1"]
STORE = f"{JOB}-rendezvous"
SERVICE = f"{JOB}-rdzv"


def _pytorchjob() -> Obj:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": JOB},
        "spec": {
            "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 3},
            "runPolicy": {"cleanPodPolicy": "Running"},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "image": "registry.example/train:1",
                                    "command": ["python", "train.py", "--epochs", "3"],
                                }
                            ]
                        }
                    },
                }
            },
        },
    }


def _native_horovod() -> Obj:
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "hvd"},
        "spec": {
            "frameworkType": "horovod",
            "replicaSpecs": {
                "worker": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "main", "image": "img", "command": ["python", "train.py"]}
                            ]
                        }
                    },
                }
            },
        },
    }


@contextmanager
def _pytorch_scenario(cluster: KubeCluster, tmp: Path) -> Iterator[Scenario]:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pytorchjob_crd()))
    cluster.wait_established("pytorchjobs.kubeflow.org")
    chosen = Scenario(cluster, tmp, nodes=4)
    chosen.operator.extra_args = ["--pytorchjobs"]
    chosen.set_up()
    try:
        yield chosen
    finally:
        chosen.kubectl("delete", "pytorchjobs", "--all", "--wait=false")
        chosen.tear_down()


def _pods(s: Scenario) -> dict[str, Obj]:
    return {p["metadata"]["name"]: p for p in s.pods()}


def _store(s: Scenario) -> Obj | None:
    pod = _pods(s).get(STORE)
    if pod is None or pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") != "Running":
        return None
    return pod


def _value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def _owner_uid(obj: Obj) -> str:
    (owner,) = obj["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("PyTorchJob", JOB)
    return str(owner["uid"])


def test_pytorchjob_workers_run_torchrun_against_the_operators_rendezvous_store(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    with _pytorch_scenario(kube_cluster, tmp_path) as s:
        s.kubectl("apply", "-f", "-", input=json.dumps(_pytorchjob()))
        s.wait(
            "2 workers and the store running", lambda: set(WORKERS) <= set(pod_names(s.pods())) and _store(s)
        )
        job = s.wait_job("pytorchjob", JOB, "job Running", lambda st: st.get("phase") == "Running")
        uid = job["metadata"]["uid"]
        namespace = s.namespace

        # The workers: the agent around torchrun's elastic agent, in the job's c10d rendezvous.
        pods = _pods(s)
        for name in WORKERS:
            command = pods[name]["spec"]["containers"][0]["command"]
            assert command[:2] == ["/trainguard/bin/trainguard-entry", "run"]
            torchrun = command[command.index("--") + 1 :]
            assert torchrun[:3] == ["python", "-m", "trainguard.pod.torchrun"]
            assert _value(torchrun, "--rdzv-backend") == "c10d"
            assert _value(torchrun, "--rdzv-endpoint") == f"{SERVICE}.{namespace}.svc:29400"
            assert _value(torchrun, "--rdzv-id") == uid
            assert _value(torchrun, "--nnodes") == "1:3"
            assert "is_host=false" in _value(torchrun, "--rdzv-conf")
            assert torchrun[-3:] == ["train.py", "--epochs", "3"]

        # The store: a pod of its own behind a ClusterIP Service, both owned by the job.
        store = pods[STORE]
        assert _owner_uid(store) == uid
        assert store["spec"]["containers"][0]["image"] == "registry.example/train:1"
        assert store["spec"]["containers"][0]["command"][:4] == [
            "/trainguard/bin/trainguard-entry",
            "python",
            "-m",
            "trainguard.pod.rendezvous_store",
        ]
        service = json.loads(s.kubectl("get", "service", SERVICE, "-o", "json"))
        assert _owner_uid(service) == uid
        assert service["spec"]["clusterIP"] not in ("", "None")
        assert service["spec"]["ports"][0]["port"] == 29400
        selector = ",".join(f"{k}={v}" for k, v in service["spec"]["selector"].items())
        selected = json.loads(s.kubectl("get", "pods", "-l", selector, "-o", "json"))["items"]
        assert [p["metadata"]["name"] for p in selected] == [STORE]
        generations = {name: pods[name]["metadata"]["labels"]["trainguard.io/generation"] for name in WORKERS}

        # Deleting the store's pod: the operator creates it again, and the job records no fault.
        s.kubectl("delete", "pod", STORE, "--grace-period=0", "--force", "--wait=false")
        old_uid = store["metadata"]["uid"]
        s.wait("the store created again", lambda: (p := _store(s)) and p["metadata"]["uid"] != old_uid)
        status = s.job("pytorchjob", JOB)["status"]
        assert status["phase"] == "Running"
        assert status["restartCounts"] == {"worker": 0}
        assert not status.get("history")
        assert all(p["name"] != STORE for p in status["pods"])
        pods = _pods(s)
        assert {n: pods[n]["metadata"]["labels"]["trainguard.io/generation"] for n in WORKERS} == generations
        # The store that serves now has no warning. (Events of pod instances gone meanwhile are not its: once in
        # two fresh-clone runs the scheduler failed to bind an instance replaced before it was bound.)
        current = s.wait("the store serving", lambda: _store(s))["metadata"]["uid"]
        reasons = json.loads(s.kubectl("get", "events", "-o", "json"))["items"]
        warnings = [
            e
            for e in reasons
            if e["involvedObject"].get("name") == STORE
            and e["involvedObject"].get("uid") == current
            and e["type"] == "Warning"
        ]
        assert not warnings, [(e.get("reason"), current, old_uid, e.get("message")) for e in warnings]

        # A worker finishes: the job succeeds, cleanPodPolicy Running stops the other, the store goes too.
        s.exit_pod(WORKERS[0], 0)
        s.wait_job("pytorchjob", JOB, "job Succeeded", lambda st: st.get("phase") == "Succeeded")
        s.wait("the store removed once no worker runs", lambda: STORE not in _pods(s))
        s.kubectl("get", "service", SERVICE)  # kept, like the headless Service, until the job is deleted


def test_a_job_without_torchrun_gets_no_rendezvous_store(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    with _pytorch_scenario(kube_cluster, tmp_path) as s:
        s.kubectl("apply", "-f", "-", input=json.dumps(_native_horovod()))
        s.wait("the worker running", lambda: pod_names(s.pods()) == ["hvd-worker-0"])
        s.wait_job("trainingjob", "hvd", "job Running", lambda st: st.get("phase") == "Running")
        services = json.loads(s.kubectl("get", "services", "-o", "json"))["items"]
        assert [svc["metadata"]["name"] for svc in services] == ["hvd"]  # the headless one only
        command = _pods(s)["hvd-worker-0"]["spec"]["containers"][0]["command"]
        assert command[command.index("--") + 1 :] == ["python", "train.py"]


def test_the_store_is_created_again_away_from_a_node_that_is_lost(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    with _pytorch_scenario(kube_cluster, tmp_path) as s:
        s.kubectl("apply", "-f", "-", input=json.dumps(_pytorchjob()))
        store = s.wait(
            "2 workers and the store running", lambda: set(WORKERS) <= set(pod_names(s.pods())) and _store(s)
        )
        s.wait_job("pytorchjob", JOB, "job Running", lambda st: st.get("phase") == "Running")
        pods = _pods(s)
        node = store["spec"]["nodeName"]
        # The preferred anti-affinity keeps the store off the workers' nodes where there is room.
        assert node not in {pods[name]["spec"]["nodeName"] for name in WORKERS}

        s.node_down(node)
        moved = s.wait(
            "the store created again on another node",
            lambda: (p := _store(s)) and p["spec"].get("nodeName") not in (None, node) and p,
        )
        assert moved["metadata"]["uid"] != store["metadata"]["uid"]
        assert f"{STORE} is on a node that is not Ready" in s.operator.log.read_text()  # not kwok's doing
        status = s.job("pytorchjob", JOB)["status"]
        assert status["phase"] == "Running"
        assert status["restartCounts"] == {"worker": 0}
        assert not status.get("history")


def test_after_a_worker_fails_the_operator_nudges_the_survivors_through_their_annotation(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """The annotation (which kubelet projects into each agent's --nudge-file) names the failure: set once
    NUDGE_AFTER_SECONDS have passed, on the pods that ran before it, never on the failed pod's replacement."""
    workers = [f"{JOB}-worker-{i}" for i in range(3)]
    obj = _pytorchjob()
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
    with _pytorch_scenario(kube_cluster, tmp_path) as s:
        s.kubectl("apply", "-f", "-", input=json.dumps(obj))
        s.wait_job("pytorchjob", JOB, "job Running", lambda st: st.get("phase") == "Running")
        for pod in _pods(s).values():
            if pod["metadata"]["name"] in workers:
                assert pod["metadata"].get("annotations", {}).get(ANNOTATION) is None
                assert "--nudge-file" in pod["spec"]["containers"][0]["command"]
        old_uid = _pods(s)[workers[1]]["metadata"]["uid"]

        s.exit_pod(workers[1], 1)
        job = s.wait_job(
            "pytorchjob",
            JOB,
            "the exit recorded",
            lambda st: any(h["pod"] == workers[1] for h in st.get("history", [])),
        )
        (fault,) = [h for h in job["status"]["history"] if h["pod"] == workers[1]]
        token = f"{workers[1]}#{fault['seq']} {fault['at']:.3f}"

        def annotations() -> dict[str, str | None]:
            return {n: p["metadata"].get("annotations", {}).get(ANNOTATION) for n, p in _pods(s).items()}

        nudged = s.wait(
            "the survivors nudged",
            lambda: (a := annotations()) and a[workers[0]] == token and a[workers[2]] == token and a,
            timeout=60,
        )
        # Not before the survivors had their chance to re-form on their own.
        assert time.time() >= fault["at"] + NUDGE_AFTER_SECONDS - 1
        replacement = _pods(s)[workers[1]]
        assert replacement["metadata"]["uid"] != old_uid
        assert nudged[workers[1]] is None
        assert nudged[STORE] is None
        events = json.loads(s.kubectl("get", "events", "-o", "json"))["items"]
        (event,) = [e for e in events if e["reason"] == "NudgeSurvivors"]
        assert workers[1] in event["message"]
        assert workers[0] in event["message"]

        # Reconciles go on (the replacement starts, statuses are written): the token is sent once.
        s.wait_job("pytorchjob", JOB, "job Running again", lambda st: st.get("phase") == "Running")
        assert annotations()[workers[1]] is None
        events = json.loads(s.kubectl("get", "events", "-o", "json"))["items"]
        assert len([e for e in events if e["reason"] == "NudgeSurvivors"]) == 1


def test_kubectl_scale_and_an_autoscalers_read_of_the_scale_subresource_find_the_workers(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """The scale subresource of a PyTorchJob: its status replicas and selector name the workers as the status
    and the pods do (``worker``), so an autoscaler reading ``/scale`` sees the running workers and selects their
    pods; ``kubectl scale`` moves ``pytorchReplicaSpecs.Worker.replicas``."""
    with _pytorch_scenario(kube_cluster, tmp_path) as s:
        s.kubectl("apply", "-f", "-", input=json.dumps(_pytorchjob()))
        s.wait_job("pytorchjob", JOB, "job Running", lambda st: st.get("phase") == "Running")
        path = f"/apis/kubeflow.org/v1/namespaces/{s.namespace}/pytorchjobs/{JOB}/scale"

        def scale() -> Obj:
            return dict(json.loads(s.kubectl("get", "--raw", path)))

        read = s.wait(
            "the scale's status at 2 workers",
            lambda: (lambda r: r if r["status"].get("replicas") == 2 else None)(scale()),
        )
        assert read["spec"]["replicas"] == 2
        selected = json.loads(s.kubectl("get", "pods", "-l", read["status"]["selector"], "-o", "json"))[
            "items"
        ]
        assert sorted(p["metadata"]["name"] for p in selected) == WORKERS

        s.kubectl("scale", "pytorchjob", JOB, "--replicas=3")
        job = s.job("pytorchjob", JOB)
        assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
        s.wait("a third worker", lambda: f"{JOB}-worker-2" in pod_names(s.pods()))
        s.wait("the scale's status at 3 workers", lambda: scale()["status"].get("replicas") == 3)
