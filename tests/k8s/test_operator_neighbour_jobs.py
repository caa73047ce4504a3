"""Two jobs side by side in one namespace, ``train`` and ``train-big``: every pod of ``train-big`` starts with
``train-``, and none of them is ``train``'s. A pod is a job's by the job's uid (its owner reference), never by
a prefix of its name: what the operator remembers of a vanished pod (its tombstone), a launch waiting for an
old incarnation to go, the pod an action names, the events on the job's page are the owning job's only.

The first test runs the operator on the test cluster; the others drive one reconcile's backend against a
fake API server (no cluster), where a launch that waits, and a pod name two jobs share, are made at will."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.cluster import KubeCluster
from tests.k8s.launches import launch
from tests.k8s.operator_harness import Scenario, pod_names, scenario
from trainguard.api import TrainingJob
from trainguard.api.load import load_object
from trainguard.backends.k8s import manifests
from trainguard.backends.k8s.backend import JobBackend
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.kinds import NATIVE as TRAININGJOB
from trainguard.backends.k8s.shared import Shared
from trainguard.backends.k8s.ui import KubeSource
from trainguard.controller.backend import LaunchPod, NudgeSurvivors, RestartInPlace, TerminatePod

Obj = dict[str, Any]
TJ = "trainingjob"
NOT_ITS_SLOT = "no pod slot of the job has this name"


def _job(name: str, role: str = "worker", **spec: Any) -> Obj:
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "frameworkType": "generic",
            "replicaSpecs": {
                role: {
                    "replicas": 1,
                    **spec,
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


def _pod_status(status: Obj, name: str) -> Obj:
    return next((p for p in status.get("pods", []) if p["name"] == name), {})


def _events(s: Scenario) -> list[Obj]:
    return list(json.loads(s.kubectl("get", "events", "-o", "json"))["items"])


@pytest.mark.k8s
@pytest.mark.timeout(300)
def test_a_pod_of_train_big_evicted_is_never_trains_business(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """``train-big`` fails for good on an eviction, so the operator keeps its pod's tombstone (the eviction
    stays an eviction); ``train`` then restarts a pod of its own, reconciling many times meanwhile. None of
    ``train``'s reconciles sees ``train-big``'s tombstone: no pod to delete, no event, nothing in its status."""
    with scenario(kube_cluster, tmp_path, nodes=3) as s:
        s.kubectl("apply", "-f", "-", input=json.dumps(_job("train")))
        s.kubectl("apply", "-f", "-", input=json.dumps(_job("train-big", restartPolicy="Never")))
        s.wait(
            "both jobs' pods running", lambda: pod_names(s.pods()) == ["train-big-worker-0", "train-worker-0"]
        )
        for name in ("train", "train-big"):
            s.wait_job(TJ, name, f"{name} Running", lambda st: st.get("phase") == "Running")

        s.evict("train-big-worker-0")
        s.wait(
            "train-big's pod gone", lambda: "train-big-worker-0" not in pod_names(s.pods(), alive_only=False)
        )
        big = s.wait_job(TJ, "train-big", "train-big Failed", lambda st: st.get("phase") == "Failed")
        (fault,) = [h for h in big["status"]["history"] if h["kind"] == "fault"]
        assert (fault["pod"], fault["fault"]) == ("train-big-worker-0", "PodEvicted")

        s.exit_pod("train-worker-0", 1)
        train = s.wait_job(
            TJ,
            "train",
            "train's pod restarted and running",
            lambda st: (
                _pod_status(st, "train-worker-0").get("generation") == 2
                and _pod_status(st, "train-worker-0").get("phase") == "Running"
                and st.get("phase") == "Running"
            ),
        )
        time.sleep(2)  # the reconciles that follow (the restart's last status writes) have their say too
        train = s.job(TJ, "train")
        assert "train-big" not in json.dumps(train["status"])
        assert [p["name"] for p in train["status"]["pods"]] == ["train-worker-0"]
        events = _events(s)
        assert not [e["message"] for e in events if NOT_ITS_SLOT in e["message"]]
        # The operator names its events <job>.<digest>: none of train's is about train-big's pod.
        trains = [e for e in events if e["metadata"]["name"].startswith("train.")]
        assert trains  # train's own (created, restarted) are there
        assert not [e["message"] for e in trains if "train-big" in json.dumps(e)]
        # And train-big still shows its pod as evicted, not as force-deleted.
        big = s.job(TJ, "train-big")
        assert [h["fault"] for h in big["status"]["history"] if h["kind"] == "fault"] == ["PodEvicted"]


# ---- one reconcile's backend, against a fake API server --------------------------------------------------


class FakeKube:
    """Pods by name, as the API server keeps them: a create of a name that is taken answers 409. Records the
    writes to pods; events are listed from ``events``."""

    def __init__(self) -> None:
        self.pods: dict[str, Obj] = {}
        self.writes: list[tuple[str, str]] = []
        self.events: list[Obj] = []

    def create(self, path: str, body: Obj) -> Obj:
        if not path.endswith("/pods"):
            return body  # the job's Service, its events: not what these tests look at
        name = body["metadata"]["name"]
        self.writes.append(("create", name))
        if name in self.pods:
            raise ApiError(409, f'pods "{name}" already exists')
        uid = f"pod-uid-{len(self.writes)}"
        self.pods[name] = {**body, "metadata": {**body["metadata"], "uid": uid, "resourceVersion": "1"}}
        return self.pods[name]

    def get(self, path: str) -> Obj:
        name = path.rsplit("/", 1)[-1]
        if name not in self.pods:
            raise ApiError(404, "not found")
        return self.pods[name]

    def delete(self, path: str, grace: int | None = None, uid: str | None = None) -> None:
        self.writes.append(("delete", path.rsplit("/", 1)[-1]))

    def patch(self, path: str, patch: Obj) -> Obj:
        name = path.rsplit("/", 1)[-1]
        self.writes.append(("patch", name))
        return self.pods[name]

    def list(self, path: str, **query: Any) -> Obj:
        """``events`` in pages of ``limit``, as the API server gives them (``continue``: here, an offset)."""
        start = int(query.get("continue") or 0)
        end = start + int(query.get("limit") or len(self.events))
        more = {"continue": str(end)} if end < len(self.events) else {}
        return {"items": self.events[start:end], "metadata": more}

    list_pages = Kube.list_pages


def _model(name: str, uid: str, role: str = "worker") -> tuple[Obj, TrainingJob]:
    obj = _job(name, role)
    obj["metadata"].update(namespace="ns", uid=uid, resourceVersion="1")
    return obj, load_object(obj, name).job


class Neighbours:
    """``train`` (uid uid-train; its role ``train_role``) and ``train-big`` (uid uid-big, role ``worker``) in
    namespace ns, with one operator's shared state and a fake API server."""

    def __init__(self, train_role: str = "worker") -> None:
        self.kube = FakeKube()
        pods = Cache(self.kube, "/api/v1/pods", lambda o, n: None)  # type: ignore[arg-type]
        nodes = Cache(self.kube, "/api/v1/nodes", lambda o, n: None)  # type: ignore[arg-type]
        self.shared = Shared(self.kube, pods, nodes)  # type: ignore[arg-type]
        self.train_obj, self.train = _model("train", "uid-train", train_role)
        self.big_obj, self.big = _model("train-big", "uid-big")

    def backend(self, obj: Obj) -> JobBackend:
        return JobBackend(self.shared, TRAININGJOB, obj)

    def big_pod(self, generation: int = 1, watched: bool = True) -> Obj:
        """train-big's pod ``train-big-worker-0`` of ``generation`` on the API server (and in the watch)."""
        body = manifests.pod(TRAININGJOB, self.big, _launch(self.big, generation), self.shared.settings)
        pod = self.kube.create("/api/v1/namespaces/ns/pods", body)
        if watched:
            self.shared.pods.put(pod)
        self.kube.writes.clear()
        return pod


def _launch(job: TrainingJob, generation: int) -> LaunchPod:
    first = launch(job, next(iter(job.spec.replica_specs)), 0, {})
    return replace(first, key=f"{first.key}/{generation}", generation=generation)


def test_a_vanished_pod_is_remembered_for_the_job_that_owns_it_only() -> None:
    """The operator's pod watch hands it an evicted pod of train-big as it is deleted: train-big sees its last
    view (the eviction keeps its cause); train sees nothing of it, however its name begins."""
    n = Neighbours()
    pod = n.big_pod(watched=False)
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
    }
    n.shared.remember_disruption(pod)

    assert n.backend(n.train_obj).observe(n.train).pods == ()
    (tomb,) = n.backend(n.big_obj).observe(n.big).pods
    assert (tomb.name, tomb.reason) == ("train-big-worker-0", "DisruptionTarget")
    assert n.backend(n.train_obj).observe(n.train).pods == ()  # still: train-big's, until train-big moves on


def test_a_launch_waiting_for_its_old_pod_waits_for_its_own_job_only() -> None:
    n = Neighbours()
    # The watch said train-big's pod was gone, but the API server still has it (on its way out): the launch of
    # its next incarnation removes it, and is recorded as one that has to wait (transient), for train-big's
    # controller to issue again; observing makes nothing, for either job.
    n.big_pod(watched=False)
    launch = _launch(n.big, 2)
    n.backend(n.big_obj).apply(n.big, [launch])
    assert n.kube.writes == [("create", "train-big-worker-0"), ("delete", "train-big-worker-0")]
    del n.kube.pods["train-big-worker-0"]  # gone now
    n.kube.writes.clear()

    assert n.backend(n.train_obj).observe(n.train).errors == ()  # not train's
    (error,) = n.backend(n.big_obj).observe(n.big).errors
    assert (error.key, error.transient) == (launch.key, True)
    assert n.kube.writes == []  # observing changes nothing


def test_a_pod_name_two_jobs_share_is_never_acted_on_by_the_job_that_does_not_own_it() -> None:
    """train's role ``big-worker`` names its pod ``train-big-worker-0``, as train-big's role ``worker`` does.
    While train-big's pod exists, train's actions on that name leave it alone; its launch fails, and says so."""
    n = Neighbours(train_role="big-worker")
    theirs = n.big_pod(generation=1)
    train = n.backend(n.train_obj)
    name = "train-big-worker-0"

    train.apply(n.train, [_launch(n.train, 2)])
    assert n.kube.writes == [("create", name)]  # refused (409), and the pod there is not deleted
    (error,) = n.shared.errors[("ns", "train")].errors()
    assert "exists and is another job's (owner uid uid-big)" in error.message
    assert not error.transient

    n.kube.writes.clear()
    train.apply(
        n.train,
        [
            TerminatePod("terminate", name, 1, "not wanted", force=True),
            RestartInPlace("in-place", name, 1, 1, "hang"),
            NudgeSurvivors("nudge", "train-worker-9", "train-worker-9#1", 1.0, (name,)),
        ],
    )
    assert n.kube.writes == []
    assert n.kube.pods[name]["metadata"]["uid"] == theirs["metadata"]["uid"]
    assert train.observe(n.train).pods == ()


def _page_source(n: Neighbours, jobs: Cache) -> KubeSource:
    """The job pages' reader over ``n``'s fake API server, with the TrainingJobs of ``jobs``."""
    return KubeSource(
        n.kube,  # type: ignore[arg-type]
        {TRAININGJOB.kind: TRAININGJOB},
        {TRAININGJOB.kind: jobs},
        n.shared.pods,
    )


def test_the_job_page_shows_the_events_of_its_own_job_and_pods() -> None:
    n = Neighbours()
    jobs = Cache(n.kube, "/apis/trainguard.io/v1/trainingjobs", lambda o, _: None)  # type: ignore[arg-type]
    for obj, pod in ((n.train_obj, "train-worker-0"), (n.big_obj, "train-big-worker-0")):
        obj["status"] = {"pods": [{"name": pod, "generation": 1, "phase": "Running"}]}
        jobs.put(obj)

    def event(kind: str, name: str, uid: str | None, reason: str) -> Obj:
        about = {"kind": kind, "name": name, **({"uid": uid} if uid else {})}
        return {"involvedObject": about, "reason": reason, "type": "Normal", "message": reason}

    n.kube.events = [
        event("TrainingJob", "train", "uid-train", "TrainJob"),
        event("Pod", "train-worker-0", None, "TrainPod"),
        event("Service", "train", "uid-service", "TrainService"),
        event("TrainingJob", "train-big", "uid-big", "BigJob"),
        event("Pod", "train-big-worker-0", None, "BigPod"),
        event("Service", "train-big", "uid-big-service", "BigService"),
        event("TrainingJob", "train", "uid-an-earlier-train", "EarlierTrain"),
    ]
    source = _page_source(n, jobs)
    assert [e["reason"] for e in source.events("ns/train")] == ["TrainJob", "TrainPod", "TrainService"]
    assert [e["reason"] for e in source.events("ns/train-big")] == ["BigJob", "BigPod", "BigService"]


def test_the_job_page_reads_every_page_of_a_busy_namespaces_events() -> None:
    """The job's events come after 1,200 of other objects' (the API server lists them by name): all found."""
    n = Neighbours()
    jobs = Cache(n.kube, "/apis/trainguard.io/v1/trainingjobs", lambda o, _: None)  # type: ignore[arg-type]
    n.train_obj["status"] = {"pods": [{"name": "train-worker-0", "generation": 1, "phase": "Running"}]}
    jobs.put(n.train_obj)
    others = [
        {"involvedObject": {"kind": "Pod", "name": f"another-{i}"}, "reason": "Other", "type": "Normal"}
        for i in range(1200)
    ]
    ours = [
        {
            "involvedObject": {"kind": "TrainingJob", "name": "train", "uid": "uid-train"},
            "reason": "TrainJob",
        },
        {"involvedObject": {"kind": "Pod", "name": "train-worker-0"}, "reason": "TrainPod"},
    ]
    n.kube.events = others + ours
    source = _page_source(n, jobs)
    assert [e["reason"] for e in source.events("ns/train")] == ["TrainJob", "TrainPod"]
