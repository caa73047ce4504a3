"""The status round-trips through JSON, and a restarted controller carries on exactly where it stopped."""

from __future__ import annotations

import json

from tests.unit.controller.harness import Harness
from trainguard.controller import JobPhase, JobStatus, reconcile

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
