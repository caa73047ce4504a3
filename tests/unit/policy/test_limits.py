"""restartLimit over its sliding window, the job's backoffLimit, and what does not count
(docs/policy.md §4)."""

from __future__ import annotations

import pytest

from tests.unit.policy.jobs import event, exited, job, role, run
from trainguard.policy import FaultKind, PodRef, Remedy

POD = PodRef("worker", 0)
OTHER = PodRef("worker", 1)


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_restart_limit_allows_exactly_limit_restarts(limit: int) -> None:
    training_job = job({"worker": role(2, restartPolicy="OnFailure", restartLimit=limit)})
    decisions, state = run(training_job, [exited(POD, 1, at=float(t)) for t in range(limit + 1)])
    assert [d.action for d in decisions] == [Remedy.RESTART] * limit + [Remedy.FAIL_JOB]
    last = decisions[-1]
    assert (last.limit, last.rule, last.permanent) == ("restartLimit", "restartPolicy", True)
    assert f"restartLimit {limit} of role worker is spent" in last.reason
    assert state.counted_restarts.get("worker", ()) == tuple(float(t) for t in range(limit))
    assert state.job_failure == last.reason


def test_restart_limit_is_per_role_not_per_pod() -> None:
    training_job = job({"worker": role(2, restartPolicy="OnFailure", restartLimit=2)})
    decisions, _ = run(training_job, [exited(POD, 1, 0.0), exited(OTHER, 1, 1.0), exited(POD, 1, 2.0)])
    assert [d.action for d in decisions] == [Remedy.RESTART, Remedy.RESTART, Remedy.FAIL_JOB]


def test_window_slides() -> None:
    training_job = job(
        {"worker": role(2, restartPolicy="OnFailure", restartLimit=2, restartTimeout=100)},
    )
    # Two restarts at 0 and 50; at 99.9 both are inside (0, 99.9] -> spent.
    decisions, _ = run(training_job, [exited(POD, 1, 0.0), exited(POD, 1, 50.0), exited(POD, 1, 99.9)])
    assert decisions[-1].action is Remedy.FAIL_JOB
    # At exactly 100 the restart at 0 has left the window (the window is half-open).
    decisions, state = run(training_job, [exited(POD, 1, 0.0), exited(POD, 1, 50.0), exited(POD, 1, 100.0)])
    assert [d.action for d in decisions] == [Remedy.RESTART] * 3
    assert state.counted_restarts["worker"] == (50.0, 100.0)  # expired times are dropped
    assert state.job_restarts == 3
    assert state.role_restarts["worker"] == 3


def test_without_a_window_restarts_count_for_the_whole_job() -> None:
    training_job = job({"worker": role(2, restartPolicy="OnFailure", restartLimit=2)})
    decisions, _ = run(training_job, [exited(POD, 1, 0.0), exited(POD, 1, 1e6), exited(POD, 1, 1e9)])
    assert [d.action for d in decisions] == [Remedy.RESTART, Remedy.RESTART, Remedy.FAIL_JOB]


def test_without_a_limit_only_the_newest_time_is_kept() -> None:
    training_job = job({"worker": role(2, restartPolicy="OnFailure")})
    _, state = run(training_job, [exited(POD, 1, float(t)) for t in range(50)])
    assert state.counted_restarts["worker"] == (49.0,)
    assert state.job_restarts == 50


def test_restart_limit_spent_on_an_elastic_role_shrinks_it() -> None:
    training_job = job(
        {
            "launcher": role(1),
            "trainer": role(3, minReplicas=1, maxReplicas=5, restartLimit=1, failPolicy="None"),
        }
    )
    pod = PodRef("trainer", 2)
    decisions, state = run(training_job, [exited(pod, 1, 0.0), exited(pod, 1, 1.0)])
    assert [d.action for d in decisions] == [Remedy.RESTART, Remedy.SHRINK]
    assert decisions[-1].limit == "restartLimit"
    assert pod in state.failed_pods


@pytest.mark.parametrize("limit", [0, 2])
def test_backoff_limit_fails_the_job_with_that_reason(limit: int) -> None:
    training_job = job(
        {"master": role(1, restartPolicy="OnFailure"), "worker": role(2, restartPolicy="OnFailure")},
        backoffLimit=limit,
    )
    faults = [exited(PodRef("master" if t % 2 else "worker", 0), 1, float(t)) for t in range(limit + 1)]
    decisions, state = run(training_job, faults)
    assert [d.action for d in decisions] == [Remedy.RESTART] * limit + [Remedy.FAIL_JOB]
    assert decisions[-1].limit == "backoffLimit"
    assert f"backoffLimit {limit} is reached" in decisions[-1].reason
    assert state.job_failure is not None
    assert "backoffLimit" in state.job_failure


def test_evictions_never_count_and_pass_spent_limits() -> None:
    training_job = job({"worker": role(2, restartPolicy="OnFailure", restartLimit=1)}, backoffLimit=1)
    faults = [exited(POD, 1, 0.0)] + [event(FaultKind.POD_EVICTED, POD, float(t)) for t in range(1, 6)]
    decisions, state = run(training_job, faults)
    assert all(d.action is Remedy.RESTART for d in decisions)
    assert [d.counted for d in decisions] == [True] + [False] * 5
    assert all(d.delay_seconds == 0 for d in decisions[1:])
    assert state.job_restarts == 1
    assert state.counted_restarts["worker"] == (0.0,)
    assert state.role_restarts["worker"] == 6
    assert state.pod(POD).restarts == 6


def test_a_replica_restart_spends_one_restart() -> None:
    training_job = job({"worker": role(4, restartPolicy="OnFailure", restartScope="Replica", restartLimit=1)})
    decisions, state = run(training_job, [exited(POD, 1, 0.0)])
    assert len(decisions[0].pods) == 4
    assert state.job_restarts == 1
    assert state.role_restarts["worker"] == 1
    assert all(state.pod(PodRef("worker", i)).restarts == 1 for i in range(4))
    decisions, _ = run(training_job, [exited(OTHER, 1, 1.0)], state)
    assert decisions[0].limit == "restartLimit"


def test_start_timeouts_count_as_further_faults() -> None:
    training_job = job({"worker": role(2, restartPolicy="ExitCode", restartLimit=2, restartTimeLimit=60)})
    faults = [
        exited(POD, 137, 0.0),
        event(FaultKind.START_TIMEOUT, POD, 61.0),
        event(FaultKind.START_TIMEOUT, POD, 122.0),
    ]
    decisions, _ = run(training_job, faults)
    assert [d.action for d in decisions] == [Remedy.RESTART, Remedy.RESTART, Remedy.FAIL_JOB]
    assert [d.rule for d in decisions] == ["restartPolicy", "restartTimeLimit", "restartTimeLimit"]
    assert decisions[1].counted
    assert decisions[1].replace_node
