"""Exponential backoff: the first restart of a streak at once, then 1 s doubling to the cap, a new streak after
healthy running (docs/policy.md §4)."""

from __future__ import annotations

from tests.unit.policy.jobs import exited, job, role, run
from trainguard.api import BackoffPolicy
from trainguard.policy import PodRef, backoff_delay, record_running

POD = PodRef("worker", 0)


def test_delay_doubles_up_to_the_cap() -> None:
    policy = BackoffPolicy()
    assert [backoff_delay(policy, n) for n in range(12)] == [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
    assert backoff_delay(policy, 10_000) == 300


def test_configured_backoff() -> None:
    policy = BackoffPolicy(initialSeconds=0.5, maxSeconds=3)
    assert [backoff_delay(policy, n) for n in range(6)] == [0, 0.5, 1, 2, 3, 3]
    assert backoff_delay(BackoffPolicy(initialSeconds=0), 5) == 0


def test_repeated_restarts_of_one_pod_back_off() -> None:
    training_job = job({"worker": role(2, restartPolicy="OnFailure")})
    decisions, state = run(training_job, [exited(POD, 1, float(t)) for t in range(5)])
    assert [d.delay_seconds for d in decisions] == [0, 1, 2, 4, 8]
    assert state.pod(POD).backoff_streak == 5
    # Another pod has its own streak.
    decisions, _ = run(training_job, [exited(PodRef("worker", 1), 1, 10.0)], state)
    assert decisions[0].delay_seconds == 0


def test_healthy_running_resets_the_streak() -> None:
    training_job = job({"worker": role(2, restartPolicy="OnFailure")}, backoff={"resetAfterSeconds": 600})
    decisions, state = run(training_job, [exited(POD, 1, 0.0), exited(POD, 1, 1.0), exited(POD, 1, 2.0)])
    assert decisions[-1].delay_seconds == 2
    # Running for 599 s is not enough ...
    state = record_running(state, POD, 100.0)
    decisions, after = run(training_job, [exited(POD, 1, 699.0)], state)
    assert (decisions[0].delay_seconds, decisions[0].healthy_before) == (4, False)
    # ... 600 s is: a new streak, whose first restart is at once.
    decisions, after = run(training_job, [exited(POD, 1, 700.0)], state)
    assert (decisions[0].delay_seconds, decisions[0].healthy_before) == (0, True)
    assert after.pod(POD).backoff_streak == 1
    # The next fault, with no healthy running since, waits again.
    decisions, _ = run(training_job, [exited(POD, 1, 701.0)], after)
    assert decisions[0].delay_seconds == 1


def test_running_since_starts_over_with_each_restart() -> None:
    training_job = job({"worker": role(2, restartPolicy="OnFailure")})
    state = record_running(run(training_job, [])[1], POD, 0.0)
    assert record_running(state, POD, 50.0).pod(POD).running_since == 0.0  # already running: kept
    _, state = run(training_job, [exited(POD, 1, 1000.0)], state)
    assert state.pod(POD).running_since is None
    assert state.pod(POD).last_restart_at == 1000.0
