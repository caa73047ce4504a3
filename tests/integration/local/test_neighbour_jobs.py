"""Two jobs side by side on the local runtime, ``train`` and ``train-big``: a pod row is its job's (the
``job`` of the row, the job's row in ``jobs``), never a pod whose name begins with the job's. What one job
observes, stops, acknowledges or launches never touches the other's pods, not even a pod of the same name
(``train`` with a role ``big-worker`` and ``train-big`` with a role ``worker`` both name
``train-big-worker-0``). At the runtime's level, on rows (no processes: fast)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from trainguard.api import TrainingJob
from trainguard.backends.local.backend import LocalBackend
from trainguard.backends.local.home import Home
from trainguard.backends.local.records import JobRecord, NodeRecord, PodRecord, PodState
from trainguard.backends.local.runtime import Runtime
from trainguard.backends.local.store import Store
from trainguard.controller.backend import LaunchPod, RestartInPlace, TerminatePod
from trainguard.controller.launchspec import launch_spec

from .jobs import SLEEPING, container

pytestmark = pytest.mark.integration

BIG_POD = "train-big-worker-0"


def _spec(name: str, role: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"replicaSpecs": {role: {"replicas": 1, "template": container(SLEEPING)}}},
    }


class Neighbours:
    """``train`` (its role ``train_role``) and ``train-big`` (role ``worker``), each with one pod row that runs
    (as far as the rows tell: no process behind them)."""

    def __init__(self, root: Path, train_role: str) -> None:
        self.home = Home(root / "home").ensure()
        self.store = Store(self.home.state_db)
        self.store.add_nodes([NodeRecord("node-0", 4)])
        self.runtime = Runtime(self.home, self.store, time.time, base_env={})
        self.backend = LocalBackend(self.home, self.store, self.runtime, time.time)
        self.records: dict[str, JobRecord] = {}
        self.jobs: dict[str, TrainingJob] = {}
        for number, (name, role) in enumerate((("train", train_role), ("train-big", "worker"))):
            spec = _spec(name, role)
            record = JobRecord(name, f"uid-{name}", spec, 1, {}, 1, 0.0, 41000 + number, workdir=str(root))
            self.records[name] = self.store.insert_job(record)
            self.jobs[name] = TrainingJob.model_validate(spec)
        self.store.insert_pod(PodRecord(BIG_POD, "train-big", "worker", 0, "node-0", PodState.RUNNING))
        if train_role != "big-worker":
            self.store.insert_pod(
                PodRecord("train-worker-0", "train", train_role, 0, "node-0", PodState.RUNNING)
            )

    def launch(self, job: str, pod: str, role: str, generation: int) -> LaunchPod:
        spec = launch_spec(
            self.jobs[job], role, 0, generation, 0, {role: 1}, self.backend.observe(self.jobs[job]).network
        )
        return LaunchPod(f"{job}/launch/{pod}/{generation}", pod, role, 0, generation, 0, "start", spec)

    def big_row(self) -> PodRecord:
        row = self.store.get_pod(BIG_POD)
        assert row is not None
        return row


def test_a_job_observes_and_stops_only_its_own_pods(tmp_path: Path) -> None:
    n = Neighbours(tmp_path, train_role="worker")
    train = n.jobs["train"]
    assert [p.name for p in n.backend.observe(train).pods] == ["train-worker-0"]
    assert [p.name for p in n.backend.observe(n.jobs["train-big"]).pods] == [BIG_POD]
    before = n.big_row()

    # Actions of train naming train-big's pod (none of train's decisions would): nothing happens to it.
    n.backend.apply(
        train,
        [TerminatePod("t", BIG_POD, 1, "not wanted", force=True), RestartInPlace("r", BIG_POD, 1, 1, "hang")],
    )
    assert n.big_row() == before
    n.runtime.terminate(train, BIG_POD, 1, force=False)
    assert n.big_row() == before
    assert [p.name for p in n.backend.observe(n.jobs["train-big"]).pods] == [BIG_POD]

    # train-big's pod deleted (by its own job): train's view does not change.
    n.runtime.terminate(n.jobs["train-big"], BIG_POD, 1, force=True)
    assert n.big_row().state is PodState.DELETED
    assert [p.name for p in n.backend.observe(train).pods] == ["train-worker-0"]
    assert n.store.get_pod("train-worker-0") is not None
    assert n.store.list_events("train") == []


def test_a_pod_name_two_jobs_share_is_never_taken_from_the_job_that_has_it(tmp_path: Path) -> None:
    """train's role ``big-worker`` names its pod as train-big's pod is named: train's launch of it fails, with
    the reason among train's errors, and train-big's pod stays as it is."""
    n = Neighbours(tmp_path, train_role="big-worker")
    train = n.jobs["train"]
    before = n.big_row()
    launch = n.launch("train", BIG_POD, "big-worker", 2)

    n.backend.apply(train, [launch])

    assert n.big_row() == before
    observed = n.backend.observe(train)
    assert observed.pods == ()
    (error,) = observed.errors
    assert error.key == launch.key
    assert "exists and is job train-big's" in error.message
    assert n.backend.observe(n.jobs["train-big"]).errors == ()
    n.backend.apply(train, [RestartInPlace("r", BIG_POD, 1, 1, "hang")])
    n.runtime.terminate(train, BIG_POD, 1, force=True)
    assert n.big_row() == before
