"""The release of a lost Horovod host's survivors (``trainguard.controller.release``): decided once per loss,
with the lost pod's address, for every other running pod of the job; recorded as a ``release`` history
entry; turned off, recorded as a wait and why; nothing for a backend that cannot, for a job that is not
Horovod's, or for the launcher (horovodrun starts over then anyway)."""

from __future__ import annotations

import pytest

from tests.fake_cluster import FakeCluster
from tests.unit.controller.harness import cce_spec, make_job
from trainguard.api import TrainingJob
from trainguard.controller import JobStatus, ReleaseMode, ReleaseSurvivors, step
from trainguard.controller.backend import EmitEvent
from trainguard.controller.status import HistoryKind, ReleaseOutcome

JOB = "test-horovod-elastic"
LAUNCHER, TRAINERS = f"{JOB}-launcher-0", [f"{JOB}-trainer-{i}" for i in range(3)]


def _running(job: TrainingJob, mode: ReleaseMode) -> tuple[FakeCluster, JobStatus]:
    cluster = FakeCluster.with_nodes(5)
    cluster.release = mode
    status = JobStatus()
    for _ in range(4):
        cluster.progress()
        for number, pod in enumerate(sorted(cluster.pods.values(), key=lambda p: p.name)):
            pod.address = f"10.0.0.{number + 10}"
        status = step(cluster, job, status, cluster.now).status
        cluster.advance(1)
    assert len(cluster.pods) == 4
    assert all(pod.started_at is not None for pod in cluster.pods.values())
    return cluster, status


def _rounds(cluster: FakeCluster, job: TrainingJob, status: JobStatus, rounds: int = 4) -> JobStatus:
    for _ in range(rounds):
        cluster.progress()
        status = step(cluster, job, status, cluster.now).status
        cluster.advance(1)
    return status


@pytest.mark.parametrize("fault", ["force_delete", "node_down"])
def test_a_lost_trainer_is_released_once_with_its_address(fault: str) -> None:
    job = make_job()
    cluster, status = _running(job, ReleaseMode.ON)
    address = cluster.pods[TRAINERS[1]].address
    if fault == "force_delete":
        cluster.force_delete(TRAINERS[1])
    else:
        node = cluster.pods[TRAINERS[1]].node
        assert node is not None
        cluster.node_down(node)
    status = _rounds(cluster, job, status)

    (release,) = cluster.releases
    assert isinstance(release, ReleaseSurvivors)
    assert release.addresses == (address,)
    assert release.lost_pod == TRAINERS[1]
    assert set(release.pods) == {LAUNCHER, TRAINERS[0], TRAINERS[2]}  # the launcher's ssh too
    # Among the other hosts (not the launcher), their connections to one another too (the previous round's).
    assert set(release.hosts) == {TRAINERS[0], TRAINERS[2]}
    assert set(release.peers) == {cluster.pods[TRAINERS[0]].address, cluster.pods[TRAINERS[2]].address}
    (fault_entry,) = [e for e in status.history if e.kind is HistoryKind.FAULT]
    assert release.token == f"{TRAINERS[1]}#{fault_entry.seq}"
    (entry,) = [e for e in status.history if e.kind is HistoryKind.RELEASE]
    assert (entry.pod, entry.address, entry.action) == (TRAINERS[1], address, ReleaseOutcome.RELEASED)
    assert set(entry.pods) == set(release.pods)
    # The policy's own decision stands: the lost trainer alone is restarted; nobody else.
    assert status.restart_counts == {"launcher": 0, "trainer": 1}


def test_turned_off_it_records_that_the_survivors_wait_and_why() -> None:
    job = make_job()
    cluster, status = _running(job, ReleaseMode.OFF)
    cluster.force_delete(TRAINERS[0])
    status = _rounds(cluster, job, status)

    assert cluster.releases == []
    (entry,) = [e for e in status.history if e.kind is HistoryKind.RELEASE]
    assert entry.action is ReleaseOutcome.WAITS
    assert "--no-release-survivors" in entry.reason
    assert "HOROVOD_GLOO_TIMEOUT_SECONDS" in entry.reason
    warnings = [a for a in cluster.log if isinstance(a, EmitEvent) and a.reason == "SurvivorsWait"]
    assert len(warnings) == 1


@pytest.mark.parametrize(
    ("mode", "framework", "lost"),
    [
        (ReleaseMode.NONE, "horovod", TRAINERS[0]),  # the backend cannot
        (ReleaseMode.ON, "pytorch", TRAINERS[0]),  # not a Horovod job (torchrun jobs are nudged instead)
        (ReleaseMode.ON, "horovod", LAUNCHER),  # horovodrun itself lost: it starts over anyway
    ],
)
def test_nothing_is_released(mode: ReleaseMode, framework: str, lost: str) -> None:
    job = make_job(cce_spec(frameworkType=framework))
    cluster, status = _running(job, mode)
    cluster.force_delete(lost)
    status = _rounds(cluster, job, status)
    assert cluster.releases == []
    assert [e for e in status.history if e.kind is HistoryKind.RELEASE] == []


def test_a_node_that_takes_two_trainers_is_one_release_naming_both() -> None:
    """A pod's release file holds one line: the losses seen together go out as one, with every address."""
    job = make_job()
    cluster, status = _running(job, ReleaseMode.ON)
    node = cluster.pods[TRAINERS[1]].node
    assert node is not None
    cluster.pods[TRAINERS[2]].node = node  # both on the node that dies
    lost = {cluster.pods[TRAINERS[1]].address, cluster.pods[TRAINERS[2]].address}
    cluster.node_down(node)
    status = _rounds(cluster, job, status)

    (release,) = cluster.releases
    assert set(release.addresses) == lost
    assert set(release.pods) == {LAUNCHER, TRAINERS[0]}
    entries = [e for e in status.history if e.kind is HistoryKind.RELEASE]
    assert sorted(str(e.pod) for e in entries) == TRAINERS[1:]
