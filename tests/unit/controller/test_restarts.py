"""Restarts: scopes, limits, backoff, start deadlines, restarts in place, evictions, refused launches."""

from __future__ import annotations

import pytest

from tests.unit.controller.harness import Harness, worker_job
from trainguard.controller import JobPhase, LaunchPod, PodPhase, RestartInPlace, TerminatePod

MASTER, W0, W1, W2 = "job-master-0", "job-worker-0", "job-worker-1", "job-worker-2"


def generations(h: Harness) -> dict[str, int]:
    return {p.name: p.generation for p in h.status.pods}


def test_scope_replica_restarts_every_pod_of_the_role_and_no_other() -> None:
    h = Harness.start(worker_job(3, restartScope="Replica"))
    h.running()
    h.cluster.exit(W1, 1)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert generations(h) == {MASTER: 1, W0: 2, W1: 2, W2: 2}
    assert h.status.restart_counts == {"master": 0, "worker": 1}
    assert {p.restarts for p in h.status.pods if p.role == "worker"} == {1}
    [entry] = h.status.history
    assert entry.scope == "Replica"
    assert entry.recovered_at is not None


def test_scope_all_restarts_every_pod_of_the_job() -> None:
    h = Harness.start(worker_job(2, restartScope="All"))
    h.running()
    h.cluster.exit(W0, 137)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert generations(h) == {MASTER: 2, W0: 2, W1: 2}
    assert h.status.restart_counts == {"master": 1, "worker": 1}


def test_pods_stopped_by_a_restart_are_not_new_faults() -> None:
    h = Harness.start(worker_job(3, restartScope="Replica"))
    h.running()
    h.cluster.exit(W1, 1)
    h.step()
    h.cluster.exit(W0, 143)  # what SIGTERM of the replica restart looks like from the old incarnation
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert len(h.status.history) == 1


def test_the_first_restart_is_at_once_and_the_next_waits_for_its_backoff() -> None:
    job = worker_job(1, job={"backoff": {"initialSeconds": 10, "maxSeconds": 40}})
    h = Harness.start(job)
    h.running()
    h.cluster.exit(W0, 1)
    h.step()
    failed_at = h.cluster.now
    assert h.pod(W0).phase is PodPhase.WAITING
    h.run_until(lambda h: any(a.pod == W0 and a.generation == 2 for a in h.cluster.launches()))
    assert h.cluster.now == failed_at  # no wait: the first restart of a streak
    h.run_until(lambda h: h.pod(W0).generation == 2 and h.status.phase is JobPhase.RUNNING)
    h.cluster.exit(W0, 1)
    result = h.step()
    failed_at = h.cluster.now
    slot = h.pod(W0)
    assert (slot.phase, slot.due_at) == (PodPhase.WAITING, failed_at + 10)
    assert result.wake_at == failed_at + 10
    h.run_until(lambda h: any(a.pod == W0 and a.generation == 3 for a in h.cluster.launches()))
    assert h.cluster.now == failed_at + 10


def test_backoff_doubles_for_repeated_failures_and_is_capped() -> None:
    job = worker_job(1, job={"backoff": {"initialSeconds": 10, "maxSeconds": 25, "resetAfterSeconds": 1000}})
    h = Harness.start(job)
    h.running()
    delays = []
    for generation in (2, 3, 4, 5):
        h.cluster.exit(W0, 1)
        h.step()
        slot = h.pod(W0)
        delays.append(0 if slot.due_at is None else slot.due_at - h.cluster.now)
        h.run_until(lambda h, g=generation: h.pod(W0).generation == g and h.status.phase is JobPhase.RUNNING)
    assert delays == [0, 10, 20, 25]


def test_backoff_limit_fails_the_job_with_that_reason() -> None:
    h = Harness.start(worker_job(1, job={"backoffLimit": 2, "backoff": {"initialSeconds": 0}}))
    h.running()
    for _ in range(2):
        h.cluster.exit(W0, 1)
        h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    h.cluster.exit(W0, 1)
    h.step()
    assert h.status.phase is JobPhase.FAILED
    assert "backoffLimit 2" in h.status.message
    assert h.status.history[-1].counters["jobRestarts"] == 2


def test_restart_limit_counts_inside_its_window_only() -> None:
    job = worker_job(
        2, restartLimit=1, restartTimeout=100, failPolicy="Any", job={"backoff": {"initialSeconds": 0}}
    )
    h = Harness.start(job)
    h.running()
    h.cluster.exit(W0, 1)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    h.cluster.advance(100)  # the first restart leaves the window
    h.cluster.exit(W0, 1)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    h.cluster.exit(W1, 1)
    h.step()
    assert h.status.phase is JobPhase.FAILED
    assert "restartLimit 1" in h.status.history[-1].reason


def test_a_restart_that_does_not_start_in_time_is_a_start_timeout_and_is_tried_elsewhere() -> None:
    h = Harness.start(worker_job(1, restartTimeLimit=30, job={"backoff": {"initialSeconds": 0}}))
    h.running()
    first_node = h.pod(W0).node
    h.cluster.exit(W0, 1)
    h.cluster.stall(W0)
    h.run_until(lambda h: len(h.status.history) == 2, limit=60)
    timeout = h.status.history[1]
    assert (timeout.fault, timeout.rule, timeout.action) == ("StartTimeout", "restartTimeLimit", "restart")
    h.cluster.unstall(W0)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert h.pod(W0).generation == 3
    stuck = [a for a in h.cluster.log if isinstance(a, TerminatePod) and a.pod == W0 and a.generation == 2]
    assert len(stuck) == 1
    assert first_node is not None


def test_a_first_start_that_waits_for_scheduling_is_not_a_start_timeout() -> None:
    h = Harness.start(worker_job(1, restartTimeLimit=5))
    h.cluster.stall(W0)
    for _ in range(20):
        h.tick()
    assert h.status.history == ()
    assert h.status.phase is JobPhase.CREATING


def test_a_refused_launch_is_a_failed_start_and_is_tried_again() -> None:
    h = Harness.start(worker_job(1, job={"backoff": {"initialSeconds": 0}}))
    h.running()
    h.cluster.exit(W0, 1)
    h.cluster.fail_launch(W0)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert [e.fault for e in h.status.history] == ["Exited", "StartTimeout"]
    assert "refused" in h.status.history[1].reason
    assert h.pod(W0).generation == 3


def test_eviction_restarts_without_counting() -> None:
    h = Harness.start(worker_job(1, restartLimit=0))
    h.running()
    h.cluster.evict(W0)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    [entry] = h.status.history
    assert (entry.fault, entry.counted, entry.action) == ("PodEvicted", False, "restart")
    assert h.status.restart_counts["worker"] == 1


def hang_job(**changes: object) -> Harness:
    return Harness.start(worker_job(1, job={"hang": {"maxConsecutive": 2, **changes}}))


def test_a_hang_restarts_in_place_and_is_recovered_once_the_agent_reports_it() -> None:
    h = hang_job()
    h.running()
    h.cluster.hang(W0)
    h.step()
    assert h.status.phase is JobPhase.RESTARTING
    [action] = [a for a in h.cluster.log if isinstance(a, RestartInPlace)]
    assert (action.pod, action.generation, action.attempt) == (W0, 1, 1)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert h.pod(W0).generation == 1  # the same pod, not a replacement
    # No rescheduling, so no restart (RESTARTS, restartCounts): a hang restart, shown on its own.
    assert (h.pod(W0).restarts, h.pod(W0).hang_restarts) == (0, 1)
    assert (h.status.restart_counts, h.status.hang_restart_counts) == (
        {"master": 0, "worker": 0},
        {"master": 0, "worker": 1},
    )
    assert h.status.history[0].recovered_at is not None
    for _ in range(3):
        h.tick()
    assert len([a for a in h.cluster.log if isinstance(a, RestartInPlace)]) == 1


def test_hangs_past_max_consecutive_fail_the_pod_with_reason_hang() -> None:
    h = hang_job()
    h.running()
    for _ in range(2):
        h.cluster.hang(W0)
        h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    h.cluster.hang(W0)
    h.run_until(lambda h: h.status.phase.is_terminal)
    assert [e.action for e in h.status.history] == ["restart-in-place", "restart-in-place", "fail-job"]
    assert h.status.history[-1].rule == "hang"
    assert h.pod(W0).phase is PodPhase.FAILED


def test_progress_resets_the_consecutive_hang_count() -> None:
    h = hang_job()
    h.running()
    for _ in range(4):
        h.cluster.hang(W0)
        h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
        h.cluster.report_progress(W0)
        h.tick()
    assert h.status.phase is JobPhase.RUNNING
    assert [e.action for e in h.status.history] == ["restart-in-place"] * 4


@pytest.mark.parametrize(("code", "phase"), [(137, JobPhase.RUNNING), (1, JobPhase.FAILED)])
def test_kubeflow_exit_code_policy(code: int, phase: JobPhase) -> None:
    h = Harness.start(worker_job(2, restartPolicy="ExitCode"))
    h.running()
    h.cluster.exit(W1, code)
    h.run_until(lambda h: h.status.phase is phase)


def test_never_fails_the_job_on_a_failed_worker() -> None:
    h = Harness.start(worker_job(2, restartPolicy="Never", failPolicy="Any"))
    h.running()
    h.cluster.exit(W1, 137)
    h.step()
    assert h.status.phase is JobPhase.FAILED
    assert not [a for a in h.cluster.launches() if a.generation > 1]


def test_always_runs_a_pod_that_exited_0_again() -> None:
    h = Harness.start(worker_job(1, restartPolicy="Always"))
    h.running()
    h.cluster.exit(W0, 0)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert h.pod(W0).generation == 2
    assert any(isinstance(a, LaunchPod) and a.pod == W0 and a.generation == 2 for a in h.cluster.log)


def test_modelarts_job_retry_restarts_the_whole_job_n_times_then_fails() -> None:
    job = worker_job(
        2, restartPolicy="Never", job={"jobRetry": {"retryNum": 2}, "backoff": {"initialSeconds": 0}}
    )
    h = Harness.start(job)
    h.running()
    for attempt in (2, 3):
        h.cluster.exit(W1, 137)
        h.run_until(lambda h, g=attempt: h.status.phase is JobPhase.RUNNING and h.pod(MASTER).generation == g)
    assert [(e.rule, e.scope) for e in h.status.history] == [("jobRetry", "All")] * 2
    h.cluster.exit(W1, 137)
    h.step()
    assert h.status.phase is JobPhase.FAILED
    assert "job-retry-num 2" in h.status.message
