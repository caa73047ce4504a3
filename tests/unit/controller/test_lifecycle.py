"""Deadlines, suspend and resume, completion policies and what is left after the end."""

from __future__ import annotations

from tests.unit.controller.harness import Harness, worker_job
from trainguard.controller import JobPhase, PodPhase, TerminatePod

MASTER, W0 = "job-master-0", "job-worker-0"


def test_a_job_past_its_time_limit_ends_as_timeout_and_its_pods_stop() -> None:
    h = Harness.start(worker_job(2, job={"timeLimit": 30, "cleanPodPolicy": "None"}))
    result = h.step()
    assert result.wake_at == 30
    h.run_until(lambda h: h.status.phase.is_terminal, limit=40)
    assert h.status.phase is JobPhase.TIMEOUT
    assert h.cluster.now == 30
    assert h.status.history[-1].rule == "timeLimit"
    assert h.status.conditions[-1].reason == "TrainingJobTimeout"
    h.tick()
    assert not h.cluster.pods  # a deadline stops running pods even with cleanPodPolicy None


def test_suspend_stops_every_pod_and_resume_starts_them_again_without_counting() -> None:
    h = Harness.start(worker_job(2, job={"timeLimit": 100}))
    h.running()
    h.job = h.job.model_copy(update={"spec": h.job.spec.model_copy(update={"suspend": True})})
    h.step()
    assert h.status.phase is JobPhase.SUSPENDED
    assert h.status.conditions[-1].type is JobPhase.SUSPENDED
    h.run_until(lambda h: not h.cluster.pods)
    for _ in range(150):  # the deadline does not run while suspended
        h.tick()
    assert h.status.phase is JobPhase.SUSPENDED
    h.job = h.job.model_copy(update={"spec": h.job.spec.model_copy(update={"suspend": False})})
    resumed_at = h.cluster.now
    h.running()
    assert {p.generation for p in h.status.pods} == {2}
    assert h.status.restart_counts == {"master": 0, "worker": 0}
    assert h.status.history == ()
    assert h.status.started_at == resumed_at
    assert [t.to_phase for t in h.status.transitions][-3:] == [
        JobPhase.SUSPENDED,
        JobPhase.PENDING,
        JobPhase.RUNNING,
    ]


def test_master_success_completes_the_job_and_clean_pod_policy_all_stops_workers() -> None:
    h = Harness.start(worker_job(2))
    h.running()
    h.cluster.exit(MASTER, 0)
    h.step()
    assert h.status.phase is JobPhase.SUCCEEDED
    assert h.status.completed_at == h.cluster.now
    h.run_until(lambda h: not h.cluster.pods)
    assert h.pod(MASTER).phase is PodPhase.SUCCEEDED
    assert {p.phase for p in h.status.pods if p.role == "worker"} == {PodPhase.REMOVED}


def test_a_finished_job_does_nothing_more_whatever_happens() -> None:
    h = Harness.start(worker_job(2, job={"cleanPodPolicy": "None"}))
    h.running()
    h.cluster.exit(MASTER, 0)
    h.step()
    actions_after_end = len(h.cluster.log)
    h.cluster.exit(W0, 1)
    h.cluster.node_down(h.pod("job-worker-1").node or "")
    for _ in range(5):
        h.tick()
    assert h.status.phase is JobPhase.SUCCEEDED
    assert h.status.transitions[-1].to_phase is JobPhase.SUCCEEDED
    new = h.cluster.log[actions_after_end:]
    assert not [a for a in new if isinstance(a, TerminatePod)]
    assert len(h.status.history) == 0


def test_worker_complete_policy_all_waits_for_every_worker() -> None:
    h = Harness.start(worker_job(2, completePolicy="All", job={"completePolicy": "All"}))
    h.running()
    h.cluster.exit(MASTER, 0)
    h.cluster.exit(W0, 0)
    h.tick()
    assert h.status.phase is JobPhase.RUNNING
    h.cluster.exit("job-worker-1", 0)
    h.step()
    assert h.status.phase is JobPhase.SUCCEEDED
