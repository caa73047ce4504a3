"""What used to happen while observing is the engine's decision now: a pod stuck terminating is removed by
force (an action under its own key, with a Warning event), and a launch that had to wait for the previous
incarnation of its pod is launched again under the next key, without counting as a fault."""

from __future__ import annotations

import pytest

from tests.fake_cluster import FakeCluster
from tests.unit.controller.harness import make_job
from trainguard.controller import JobStatus, LaunchPod, TerminatePod, step
from trainguard.controller.backend import EmitEvent
from trainguard.controller.cycle import MAX_LAUNCH_ATTEMPTS

TRAINER = "test-horovod-elastic-trainer-1"


def _running() -> tuple[FakeCluster, JobStatus]:
    cluster = FakeCluster.with_nodes(5)
    job = make_job()
    status = JobStatus()
    for _ in range(4):
        cluster.progress()
        status = step(cluster, job, status, cluster.now).status
        cluster.advance(1)
    assert all(pod.started_at is not None for pod in cluster.pods.values())
    return cluster, status


def _run(cluster: FakeCluster, status: JobStatus, rounds: int = 3) -> JobStatus:
    job = make_job()
    for _ in range(rounds):
        cluster.progress()
        status = step(cluster, job, status, cluster.now).status
        cluster.advance(1)
    return status


def _forced(cluster: FakeCluster) -> list[TerminatePod]:
    return [a for a in cluster.log if isinstance(a, TerminatePod) and a.key.endswith("/remove-stuck")]


@pytest.mark.parametrize(
    ("node_ready", "overdue", "removed"),
    [(True, False, False), (False, False, True), (True, True, True), (False, True, True)],
)
def test_a_pod_stuck_terminating_is_removed_by_force_once(
    node_ready: bool, overdue: bool, removed: bool
) -> None:
    cluster, status = _running()
    pod = cluster.pods[TRAINER]
    pod.terminating = True  # its deletion was asked for (by anyone) and it has not gone
    pod.overdue = overdue
    if not node_ready:
        assert pod.node is not None
        cluster.node_down(pod.node)
    status = _run(cluster, status)

    forced = _forced(cluster)
    if not removed:
        assert forced == []
        return
    (action,) = forced
    assert (action.pod, action.generation, action.force) == (TRAINER, 1, True)
    why = "not Ready" if not node_ready else "after its grace period"
    assert why in action.reason
    (event,) = [a for a in cluster.log if isinstance(a, EmitEvent) and a.reason == "ForceDeletePod"]
    assert event.pod == TRAINER
    assert action.key in status.issued_keys  # recorded: a restarted controller does not issue it again


def test_a_launch_that_has_to_wait_is_launched_again_under_the_next_key_without_a_fault() -> None:
    cluster, status = _running()
    cluster.exit("test-horovod-elastic-launcher-0", 129)  # restarted by its rule: a new incarnation
    launcher = "test-horovod-elastic-launcher-0"
    cluster.waiting.add(launcher)  # its first launch finds the previous incarnation still there
    status = _run(cluster, status, rounds=4)

    launches = [a for a in cluster.launches() if a.pod == launcher and a.generation == 2]
    assert [a.key.rsplit("/", 1)[-1] for a in launches] == ["launch", "launch2"]
    (error,) = [e for e in cluster.errors if e.key == launches[0].key]
    assert error.transient
    assert cluster.pods[launcher].generation == 2
    faults = [h for h in status.history if h.kind == "fault"]
    assert len(faults) == 1  # the exit code only: waiting is no fault


def test_launch_attempts_are_bounded() -> None:
    cluster, status = _running()
    launcher = "test-horovod-elastic-launcher-0"
    cluster.exit(launcher, 129)
    job = make_job()
    for _ in range(MAX_LAUNCH_ATTEMPTS + 5):
        cluster.waiting.add(launcher)
        cluster.progress()
        status = step(cluster, job, status, cluster.now).status
        cluster.advance(1)
    attempts = [a for a in cluster.launches() if a.pod == launcher and a.generation == 2]
    assert len(attempts) == MAX_LAUNCH_ATTEMPTS
    assert all(isinstance(a, LaunchPod) for a in attempts)
