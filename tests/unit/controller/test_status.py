"""The status round-trips through JSON, and a restarted controller carries on exactly where it stopped."""

from __future__ import annotations

import json

from tests.unit.controller.harness import Harness
from trainguard.controller import JobPhase, JobStatus, reconcile
from trainguard.controller.backend import LaunchPod, WriteStatus

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


def test_a_jobs_first_batch_is_stored_once_after_its_launches_and_nothing_is_done_twice_after_a_crash() -> (
    None
):
    h = Harness.start()
    first = reconcile(h.job, JobStatus(), h.cluster.observe(h.job), h.cluster.now)
    writes = [a for a in first.actions if isinstance(a, WriteStatus)]
    assert len(writes) == 1
    assert first.actions[-1] is writes[0]  # no round trip before the pods
    launches = [a for a in first.actions if isinstance(a, LaunchPod)]
    assert launches
    # A controller that crashed before that write finds the status still empty and the pods launched: it
    # takes them as the first incarnations of their slots, and launches none again.
    h.cluster.apply(h.job, first.actions[:-1])
    accepted = len(h.cluster.log)
    again = reconcile(h.job, JobStatus(), h.cluster.observe(h.job), h.cluster.now)
    assert not [a for a in again.actions if isinstance(a, LaunchPod)]
    h.cluster.apply(h.job, again.actions)
    assert [a for a in h.cluster.log[accepted:] if not isinstance(a, WriteStatus)] == []  # only the status
    assert {p.name: p.generation for p in again.status.pods} == {
        p.name: p.generation for p in first.status.pods
    }
    # Had it crashed before any pod was created, it would launch the same ones under the same keys.
    fresh = Harness.start()
    redo = reconcile(fresh.job, JobStatus(), fresh.cluster.observe(fresh.job), fresh.cluster.now)
    assert [a.key for a in redo.actions if isinstance(a, LaunchPod)] == [a.key for a in launches]
