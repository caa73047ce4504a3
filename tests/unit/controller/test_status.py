"""The status round-trips through JSON, and a restarted controller carries on exactly where it stopped."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from tests.unit.controller.harness import Harness, make_job, worker_job
from trainguard.api import TrainingJob
from trainguard.controller import (
    EmitEvent,
    JobPhase,
    JobStatus,
    LaunchPod,
    TerminatePod,
    WriteStatus,
    reconcile,
)

LAUNCHER = "test-horovod-elastic-launcher-0"


def through_json(status: JobStatus) -> JobStatus:
    return JobStatus.from_dict(json.loads(json.dumps(status.to_dict())))


def test_status_uses_the_kubernetes_field_names() -> None:
    h = Harness.start()
    h.running()
    data = h.status.to_dict()
    assert {"phase", "conditions", "restartCounts", "replicas", "pods", "history", "policyState"} <= set(data)
    assert set(data["conditions"][0]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "lastProbeTime",
    }
    assert data["transitions"][0] == {
        "from": None,
        "to": "Pending",
        "at": 0.0,
        "reason": data["transitions"][0]["reason"],
    }


def test_a_status_mid_restart_round_trips_and_behaves_the_same() -> None:
    h = Harness.start(start_seconds=3)
    h.running()
    h.cluster.exit(LAUNCHER, 129)
    h.step()
    assert h.status.phase is JobPhase.RESTARTING
    for _ in range(8):
        restored = through_json(h.status)
        assert restored == h.status
        observed = h.cluster.observe(h.job)
        now = h.cluster.now
        assert reconcile(h.job, restored, observed, now) == reconcile(h.job, h.status, observed, now)
        h.tick()
    assert h.status.phase is JobPhase.RUNNING


def test_a_controller_that_crashed_before_storing_issues_the_same_keys_again() -> None:
    h = Harness.start()
    h.running()
    h.cluster.exit(LAUNCHER, 129)
    before = h.status
    observed = h.cluster.observe(h.job)
    first = reconcile(h.job, before, observed, h.cluster.now)
    again = reconcile(h.job, before, observed, h.cluster.now)
    assert [a.key for a in first.actions] == [a.key for a in again.actions]
    h.cluster.apply(h.job, first.actions)
    accepted = len(h.cluster.log)
    h.cluster.apply(h.job, again.actions)
    assert len(h.cluster.log) == accepted


def test_the_same_observation_reconciled_again_issues_nothing() -> None:
    h = Harness.start()
    h.running()
    h.cluster.exit(LAUNCHER, 129)
    observed = h.cluster.observe(h.job)
    first = reconcile(h.job, h.status, observed, h.cluster.now)
    assert first.actions
    second = reconcile(h.job, first.status, observed, h.cluster.now)
    assert second.actions == ()
    assert second.status == first.status


def _writes(actions: tuple[Any, ...]) -> list[int]:
    """Where in a batch its status writes stand."""
    return [i for i, action in enumerate(actions) if isinstance(action, WriteStatus)]


def _crash_in_next_batch(h: Harness, cut: int) -> None:
    """The next reconcile's batch carried out up to ``cut`` actions, then the controller crashes: its successor
    reads what was stored, and the cluster moves on."""
    result = reconcile(h.job, h.status, h.cluster.observe(h.job), h.cluster.now)
    h.cluster.apply(h.job, result.actions[:cut])
    h.status = h.cluster.stored or JobStatus()
    h.cluster.advance(1)


def _no_pod_launched_twice(h: Harness, cut: int) -> Counter[tuple[str, int]]:
    assert not [e for e in h.cluster.errors if "already exists" in e.message], cut
    launched = Counter((a.pod, a.generation) for a in h.cluster.launches())
    assert set(launched.values()) == {1}, (cut, launched)
    return launched


@pytest.mark.parametrize(
    "job", [worker_job(3), make_job()], ids=["PyTorch's master and workers", "CCE's job"]
)
def test_a_controller_that_crashes_in_a_new_jobs_first_batch_launches_each_pod_once(job: TrainingJob) -> None:
    """A new job's first decision, when it only launches pods, is stored after them (one status write, no round
    trip before the pods); a crash after any part of the batch begins the job again from nothing, and each of
    its pods is launched once, under the same key."""
    first = reconcile(job, JobStatus(), Harness.start(job, nodes=7).cluster.observe(job), 0.0)
    assert _writes(first.actions) == [len(first.actions) - 1]
    assert {type(action) for action in first.actions[:-1]} == {LaunchPod, EmitEvent}
    for cut in range(len(first.actions)):
        h = Harness.start(job, nodes=7)
        _crash_in_next_batch(h, cut)
        h.running()
        launched = _no_pod_launched_twice(h, cut)
        assert {pod.name for pod in h.status.pods} == {pod for pod, _ in launched}, cut


def test_a_restart_is_stored_before_its_launch() -> None:
    """A restart's decision (counted, with its backoff, and the failed pod removed) is stored before its
    actions: only launches that the stored status already decides are stored after them."""
    h = Harness.start()
    h.running()
    h.cluster.exit(LAUNCHER, 129)
    result = reconcile(h.job, h.status, h.cluster.observe(h.job), h.cluster.now)
    assert isinstance(result.actions[0], WriteStatus)
    assert any(isinstance(action, (LaunchPod, TerminatePod)) for action in result.actions)


def test_a_controller_that_crashes_in_a_scale_outs_batch_launches_the_new_pod_once() -> None:
    """A scale-out's batch (its new pod's first launch and its events) is stored once, after it; a crash after
    any part of it takes the same scale request again, and launches the new pod once."""
    new = "test-horovod-elastic-trainer-3"
    probe = Harness.start()
    probe.running()
    probe.cluster.scale("trainer", 4)
    batch = reconcile(probe.job, probe.status, probe.cluster.observe(probe.job), probe.cluster.now).actions
    assert _writes(batch) == [len(batch) - 1]
    assert [action.pod for action in batch if isinstance(action, LaunchPod)] == [new]
    for cut in range(len(batch)):
        h = Harness.start()
        h.running()
        h.cluster.scale("trainer", 4)
        _crash_in_next_batch(h, cut)
        h.run_until(lambda h: h.status.phase is JobPhase.RUNNING and new in h.cluster.running())
        assert [(a.pod, a.generation) for a in h.cluster.launches() if a.pod == new] == [(new, 1)], cut
        _no_pod_launched_twice(h, cut)
        assert h.status.desired["trainer"] == 4, cut


def test_a_controller_that_crashes_in_a_restarts_launch_launches_the_next_incarnation_once() -> None:
    """A restart is stored before its pod is removed; the launch of its next incarnation, once the previous one
    is gone, is stored after it. A crash after any part of that launch's batch launches the incarnation once,
    and the restart stays counted once."""
    failed = "job-worker-1"

    def restarting() -> Harness:
        h = Harness.start(worker_job(3))
        h.running()
        h.cluster.exit(failed, 137)
        decided = h.step()
        assert isinstance(decided.actions[0], WriteStatus)  # the restart, counted, before the removal
        h.cluster.progress()
        return h

    probe = restarting()
    batch = reconcile(probe.job, probe.status, probe.cluster.observe(probe.job), probe.cluster.now).actions
    assert [(a.pod, a.generation) for a in batch if isinstance(a, LaunchPod)] == [(failed, 2)]
    assert _writes(batch) == [len(batch) - 1]
    for cut in range(len(batch)):
        h = restarting()
        _crash_in_next_batch(h, cut)
        h.running()
        _no_pod_launched_twice(h, cut)
        assert [a.generation for a in h.cluster.launches() if a.pod == failed] == [1, 2], cut
        assert h.status.restart_counts["worker"] == 1, cut


def _force_deleted(failed: str) -> Harness:
    h = Harness.start(worker_job(3))
    h.running()
    h.cluster.force_delete(failed)
    h.cluster.progress()
    return h


def test_the_replacement_of_a_vanished_pod_goes_out_before_the_status_write() -> None:
    """A pod deleted under the job (a force-deletion): its fault is counted and its next incarnation launched in
    one batch, stored once, after the launch (no status round trip before the pod)."""
    failed = "job-worker-1"
    h = _force_deleted(failed)
    batch = reconcile(h.job, h.status, h.cluster.observe(h.job), h.cluster.now).actions
    assert [(a.pod, a.generation) for a in batch if isinstance(a, LaunchPod)] == [(failed, 2)]
    assert _writes(batch) == [len(batch) - 1]
    stored = batch[-1]
    assert isinstance(stored, WriteStatus)
    assert stored.status.restart_counts["worker"] == 1
    assert [e.fault for e in stored.status.history if e.pod == failed] == ["PodForceDeleted"]


def test_a_controller_that_crashes_in_a_vanished_pods_replacement_counts_the_fault_once() -> None:
    """A crash after any part of that batch: the successor finds the stored incarnation gone and decides the same
    fault again; the next incarnation is launched once, and the fault is counted and recorded once."""
    failed = "job-worker-1"
    probe = _force_deleted(failed)
    batch = reconcile(probe.job, probe.status, probe.cluster.observe(probe.job), probe.cluster.now).actions
    for cut in range(len(batch) + 1):
        h = _force_deleted(failed)
        _crash_in_next_batch(h, cut)
        h.running()
        _no_pod_launched_twice(h, cut)
        assert [a.generation for a in h.cluster.launches() if a.pod == failed] == [1, 2], cut
        assert h.status.restart_counts["worker"] == 1, cut
        assert [e.fault for e in h.status.history if e.pod == failed] == ["PodForceDeleted"], cut
