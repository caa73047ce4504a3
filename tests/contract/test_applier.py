"""The one applier's rules, and the decisions that used to be taken while observing, on every backend.

Each backend is driven through its own ``observe`` and ``apply`` (no job-level driver: these are the
backend interface's rules, ``trainguard.controller.backend``):

- a status write that meets a newer stored status stops the batch: nothing after it is carried out, the
  conflict is recorded under the write's key, and ``apply`` says so;
- a pod stuck terminating (on a node that is not Ready, or past its grace period) is the controller's to
  remove: ``reconcile`` decides a forced removal under its own key, and the backend carries it out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import psutil
import pytest
from benchmarks._kwok import node_list, not_ready_patch

from tests.fake_cluster import FakeCluster
from tests.integration.local.jobs import SLEEPING, container
from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import install_crds
from trainguard.api import TrainingJob
from trainguard.backends.k8s import manifests, metadata
from trainguard.backends.k8s.backend import JobBackend
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import Kube
from trainguard.backends.k8s.kinds import NATIVE
from trainguard.backends.k8s.shared import Shared
from trainguard.backends.local.backend import LocalBackend
from trainguard.backends.local.home import Home
from trainguard.backends.local.records import JobRecord, NodeRecord, PodRecord, PodState
from trainguard.backends.local.runtime import Runtime
from trainguard.backends.local.store import Store
from trainguard.backends.sim import SimCluster, VirtualClock
from trainguard.backends.sim.pods import GPU_POOL
from trainguard.controller import (
    Backend,
    JobPhase,
    JobStatus,
    LaunchPod,
    TerminatePod,
    WriteStatus,
    reconcile,
)
from trainguard.controller.launchspec import Network, launch_spec

JOB = "applier"
ROLE = "worker"
POD = f"{JOB}-{ROLE}-0"
OTHER_POD = f"{JOB}-{ROLE}-1"
IMAGE = "example.invalid/trainer:1"


def _spec(namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": JOB, "namespace": namespace},
        "spec": {"replicaSpecs": {ROLE: {"replicas": 2, "template": container(SLEEPING)}}},
    }


def _job(uid: str, namespace: str = "default") -> TrainingJob:
    spec = _spec(namespace)
    spec["metadata"]["uid"] = uid
    return TrainingJob.model_validate(spec)


def _launch(job: TrainingJob, pod: str, index: int) -> LaunchPod:
    spec = launch_spec(job, ROLE, index, 1, 0, {ROLE: 2}, Network())
    return LaunchPod(f"{job.metadata.uid}/{pod}/g1/launch", pod, ROLE, index, 1, 0, "start", spec)


def _ended() -> JobStatus:
    """A job that has ended (cleanPodPolicy None): its pods are left as they are, unless stuck terminating."""
    return JobStatus(phase=JobPhase.SUCCEEDED, started_at=1.0, completed_at=2.0, revision=3)


class Rig(Protocol):
    name: str
    job: TrainingJob
    backend: Backend

    def stale_status(self) -> JobStatus:
        """The status as this controller read it, after which another writer stored a newer one."""

    def present(self, pod: str) -> bool: ...

    def stuck_pod(self) -> str:
        """A pod of the job, terminating, that will not finish by itself (its node is not Ready, or its
        grace period is over); its name."""

    def removed(self, pod: str) -> bool:
        """The forced removal of ``pod`` reached the backend (gone, or deleted with no grace left)."""

    def close(self) -> None: ...


# ---- the rules ----------------------------------------------------------------------------------------


def test_a_conflicting_status_write_stops_the_batch_and_is_recorded_under_its_key(rig: Rig) -> None:
    status = rig.stale_status()
    write = WriteStatus("status/write", status.model_copy(update={"revision": status.revision + 1}))
    launch = _launch(rig.job, OTHER_POD, 1)

    applied = rig.backend.apply(rig.job, [write, launch])

    assert applied.conflict
    errors = rig.backend.observe(rig.job).errors
    assert [(e.key, e.transient) for e in errors] == [(write.key, False)]
    assert "conflict" in errors[0].message
    assert not rig.present(OTHER_POD)  # decided from a stale status: not carried out


def test_a_pod_stuck_terminating_is_removed_by_the_controllers_action(rig: Rig) -> None:
    pod = rig.stuck_pod()
    result = reconcile(rig.job, _ended(), rig.backend.observe(rig.job), time.time())
    forced = [a for a in result.actions if isinstance(a, TerminatePod) and a.key.endswith("/remove-stuck")]
    assert [(a.pod, a.force) for a in forced] == [(pod, True)]
    assert any(key == forced[0].key for key in result.status.issued_keys)  # recorded

    rig.backend.apply(rig.job, result.actions)
    deadline = time.monotonic() + 30
    while not rig.removed(pod):
        assert time.monotonic() < deadline, f"{rig.name}: {pod} not removed"
        time.sleep(0.05)


# ---- the rigs -----------------------------------------------------------------------------------------


class FakeRig:
    name = "fake"

    def __init__(self) -> None:
        self.cluster = FakeCluster.with_nodes(3)
        self.backend: Backend = self.cluster
        self.job = _job("uid-fake")

    def stale_status(self) -> JobStatus:
        self.cluster.stored = JobStatus(revision=5)
        return JobStatus(revision=4)

    def present(self, pod: str) -> bool:
        self.cluster.progress()
        return pod in self.cluster.pods

    def stuck_pod(self) -> str:
        self.cluster.apply(self.job, [_launch(self.job, POD, 0)])
        self.cluster.advance(1)
        self.cluster.sticky.add(POD)
        self.cluster.apply(self.job, [TerminatePod("graceful", POD, 1, "scale in")])
        node = self.cluster.pods[POD].node
        assert node is not None
        assert self.cluster.pods[POD].terminating
        self.cluster.node_down(node)
        return POD

    def removed(self, pod: str) -> bool:
        self.cluster.progress()
        return pod not in self.cluster.pods

    def close(self) -> None:
        pass


class SimRig:
    name = "sim"

    def __init__(self) -> None:
        self.cluster = SimCluster.build(VirtualClock(), {GPU_POOL: 3}, start_seconds=1.0, stop_seconds=600.0)
        self.backend: Backend = self.cluster
        self.job = _job("uid-sim")

    def stale_status(self) -> JobStatus:
        self.cluster.stored = JobStatus(revision=5)
        return JobStatus(revision=4)

    def present(self, pod: str) -> bool:
        return pod in self.cluster.pods

    def stuck_pod(self) -> str:
        self.cluster.apply(self.job, [_launch(self.job, POD, 0)])
        _run_until(self.cluster.clock, self.cluster.now + 2)
        self.cluster.apply(self.job, [TerminatePod("graceful", POD, 1, "scale in")])  # 600 s to stop
        pod = self.cluster.pods[POD]
        assert pod.terminating
        assert pod.node is not None
        self.cluster.node_down(pod.node)
        return POD

    def removed(self, pod: str) -> bool:
        return pod not in self.cluster.pods

    def close(self) -> None:
        pass


def _run_until(clock: VirtualClock, when: float) -> None:
    """What the simulator schedules until ``when`` (its engine's loop, without a job of its own)."""
    while (due := clock.next_time()) is not None and due <= when:
        clock.advance_to(due)
        clock.pop()()
    clock.advance_to(when)


class LocalRig:
    """The local backend on its store, with one real process behind the stuck pod's row."""

    name = "local"

    def __init__(self, root: Path) -> None:
        self.home = Home(root / "home").ensure()
        self.store = Store(self.home.state_db)
        self.store.add_nodes([NodeRecord("node-0", 4)])
        self.runtime = Runtime(self.home, self.store, time.time, base_env={})
        self.backend: LocalBackend = LocalBackend(self.home, self.store, self.runtime, time.time)
        spec = _spec()
        record = JobRecord(JOB, "uid-local", spec, 1, {}, 1, 0.0, 41900, workdir=str(root))
        self.record = self.store.insert_job(record)
        self.job = _job("uid-local")
        self.process: subprocess.Popen[bytes] | None = None

    def stale_status(self) -> JobStatus:
        record = self.store.get_job(JOB)
        assert record is not None
        status = self.backend.read_status(record)  # this controller's read (and the version it expects)
        self.store.update_status(JOB, {"phase": "Running"}, record.status_version)  # another writer
        return status

    def present(self, pod: str) -> bool:
        return self.store.get_pod(pod) is not None

    def stuck_pod(self) -> str:
        # A process that ignores SIGTERM, stopped as well: its removal was asked for, and its grace is over.
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
            ]
        )
        os.kill(self.process.pid, signal.SIGSTOP)
        created = psutil.Process(self.process.pid).create_time()
        row = PodRecord(POD, JOB, ROLE, 0, "node-0", PodState.RUNNING)
        row = replace(
            row,
            state=PodState.TERMINATING,
            pid=self.process.pid,
            create_time=created,
            deleted_by_us=True,
            stop_deadline=time.time() - 1,
        )
        self.store.insert_pod(row)
        return POD

    def removed(self, pod: str) -> bool:
        row = self.store.get_pod(pod)
        gone = self.process is None or self.process.poll() is not None
        return gone and (row is None or row.state is PodState.DELETED)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class KubeRig:
    """The operator's backend for one job, against the test cluster's API server (kwok's nodes)."""

    name = "k8s"
    FINALIZER = "trainguard.io/test-hold"

    def __init__(self, cluster: KubeCluster) -> None:
        install_crds(cluster)
        self.cluster = cluster
        suffix = uuid.uuid4().hex[:6]
        self.namespace = f"tg-applier-{suffix}"
        self.node = f"tg-applier-{suffix}-node"
        cluster.kubectl("create", "namespace", self.namespace)
        cluster.kubectl("apply", "-f", "-", input=node_list([self.node], group=self.namespace))
        spec = _spec(self.namespace)
        for pod_container in spec["spec"]["replicaSpecs"][ROLE]["template"]["spec"]["containers"]:
            pod_container["image"] = IMAGE  # kwok never pulls it
        obj = json.loads(
            cluster.kubectl("-n", self.namespace, "create", "-o", "json", "-f", "-", input=json.dumps(spec))
        )
        self.obj = obj
        self.job = TrainingJob.model_validate(
            {**spec, "metadata": {**spec["metadata"], "uid": obj["metadata"]["uid"]}}
        )
        self.kube = Kube(str(cluster.kubeconfig))
        shared: list[Shared] = []
        pods = Cache(
            self.kube,
            f"/api/v1/namespaces/{self.namespace}/pods",
            lambda old, now: None,
            label_selector=metadata.LABEL_JOB,
            index_label=metadata.LABEL_JOB,
        )

        def node_changed(old: dict[str, Any], now: dict[str, Any] | None) -> None:
            shared[0].node_changed(old, now)

        nodes = Cache(self.kube, "/api/v1/nodes", node_changed)
        self.shared = Shared(self.kube, pods, nodes, settings=manifests.PodSettings(agent_image=IMAGE))
        shared.append(self.shared)
        pods.start()
        nodes.start()
        self._wait(lambda: pods.synced.is_set() and nodes.synced.is_set(), "the caches")
        self.backend: Backend = JobBackend(self.shared, NATIVE, obj)

    def _wait(self, check: Any, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"k8s: no {what} after {timeout} s"
            time.sleep(0.05)

    def _kubectl(self, *args: str, input: str | None = None) -> str:
        return self.cluster.kubectl("-n", self.namespace, *args, input=input)

    def stale_status(self) -> JobStatus:
        patch = {"status": {"phase": "Running"}}
        self._kubectl(
            "patch", "trainingjob", JOB, "--subresource=status", "--type=merge", "-p", json.dumps(patch)
        )
        return JobStatus()  # read at the resourceVersion of ``self.obj``, which is older now

    def present(self, pod: str) -> bool:
        return bool(self._kubectl("get", "pods", "-o", "name", "--ignore-not-found", pod).strip())

    def stuck_pod(self) -> str:
        self.backend.apply(self.job, [_launch(self.job, POD, 0)])
        patch = {"metadata": {"finalizers": [self.FINALIZER]}, "spec": {}}
        self._kubectl("patch", "pod", POD, "--type=merge", "-p", json.dumps({"metadata": patch["metadata"]}))
        self._kubectl("delete", "pod", POD, "--wait=false")  # terminating: the finalizer holds it
        self.cluster.kubectl("patch", "node", self.node, "--type=merge", "-p", json.dumps(not_ready_patch()))
        self._wait(
            lambda: (
                (p := self.shared.pods.get(self.namespace, POD)) is not None
                and p["metadata"].get("deletionTimestamp")
                and self.shared.node_is_ready(self.node) is False
            ),
            "terminating pod on a NotReady node in the caches",
        )
        return POD

    def removed(self, pod: str) -> bool:
        found = json.loads(self._kubectl("get", "pod", pod, "-o", "json", "--ignore-not-found") or "{}")
        return not found or found["metadata"].get("deletionGracePeriodSeconds") == 0

    def close(self) -> None:
        if self.present(POD):
            self._kubectl(
                "patch", "pod", POD, "--type=json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]'
            )
        self.shared.pods.stop()
        self.shared.nodes.stop()
        self.kube.close()
        self.cluster.kubectl("delete", "namespace", self.namespace, "--wait=false")
        self.cluster.kubectl("delete", "node", self.node, "--wait=false")


@pytest.fixture(
    params=[
        "fake",
        "sim",
        pytest.param("local", marks=pytest.mark.integration),
        pytest.param("k8s", marks=pytest.mark.k8s),
    ]
)
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rig]:
    chosen: Any
    if request.param == "fake":
        chosen = FakeRig()
    elif request.param == "sim":
        chosen = SimRig()
    elif request.param == "local":
        chosen = LocalRig(tmp_path)
    else:
        chosen = KubeRig(request.getfixturevalue("kube_cluster"))
    yield chosen
    chosen.close()
