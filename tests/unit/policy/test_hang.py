"""Restart upon suspension: in place, uncounted, at most maxConsecutive in a row (docs/policy.md §5)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.jobs import event, job, role, run
from trainguard.api import RestartScope, TrainingJob
from trainguard.policy import Fault, FaultKind, PodRef, Remedy, record_progress

POD = PodRef("worker", 1)


def _hang(at: float) -> Fault:
    return event(FaultKind.HANG, POD, at)


def _job(max_consecutive: int = 3, **role_fields: Any) -> TrainingJob:
    # restartLimit 0: any counted restart would be refused, so the hang restarts prove they are not counted.
    fields: dict[str, Any] = {"restartPolicy": "OnFailure", "restartLimit": 0, **role_fields}
    return job({"worker": role(3, **fields)}, hang={"timeoutSeconds": 60, "maxConsecutive": max_consecutive})


@pytest.mark.parametrize("max_consecutive", [1, 3])
def test_in_place_up_to_the_limit_then_failure_with_reason_hang(max_consecutive: int) -> None:
    decisions, state = run(_job(max_consecutive), [_hang(float(t)) for t in range(max_consecutive + 1)])
    in_place = decisions[:-1]
    assert all(d.action is Remedy.RESTART_IN_PLACE for d in in_place)
    assert all(
        (d.rule, d.scope, d.counted, d.pods) == ("hang", RestartScope.POD, False, (POD,)) for d in in_place
    )
    assert all(d.delay_seconds == 0 and not d.replace_node for d in in_place)
    assert f"hang restart {max_consecutive} of {max_consecutive} in a row" in in_place[-1].reason
    last = decisions[-1]
    assert (last.action, last.rule, last.limit, last.permanent) == (
        Remedy.FAIL_JOB,
        "hang",
        "hang.maxConsecutive",
        True,
    )
    assert "reason Hang" in last.reason
    assert state.job_restarts == 0
    # Nothing was rescheduled: no restart to RESTARTS or restartCounts (the controller counts hang restarts).
    assert (state.pod(POD).restarts, state.role_restarts.get("worker", 0)) == (0, 0)
    assert state.pod(POD).consecutive_hangs == max_consecutive


def test_progress_resets_the_count() -> None:
    training_job = _job(3)
    _, state = run(training_job, [_hang(0.0), _hang(1.0), _hang(2.0)])
    assert state.pod(POD).consecutive_hangs == 3
    state = record_progress(state, POD, 3.0)
    assert state.pod(POD).consecutive_hangs == 0
    decisions, state = run(training_job, [_hang(4.0), _hang(5.0), _hang(6.0), _hang(7.0)], state)
    assert [d.action for d in decisions] == [Remedy.RESTART_IN_PLACE] * 3 + [Remedy.FAIL_JOB]


def test_progress_of_another_pod_does_not_reset() -> None:
    training_job = _job(1)
    _, state = run(training_job, [_hang(0.0)])
    state = record_progress(state, PodRef("worker", 0), 1.0)
    decisions, _ = run(training_job, [_hang(2.0)], state)
    assert decisions[0].action is Remedy.FAIL_JOB


def test_a_hang_past_the_limit_shrinks_a_tolerant_elastic_role() -> None:
    training_job = _job(1, minReplicas=1, maxReplicas=3, failPolicy="None")
    decisions, state = run(training_job, [_hang(0.0), _hang(1.0)])
    assert [d.action for d in decisions] == [Remedy.RESTART_IN_PLACE, Remedy.SHRINK]
    assert POD in state.failed_pods


def test_hang_handling_comes_before_a_hang_entry() -> None:
    training_job = _job(1, faultTolerantPolicy=[{"exceptionalEvent": "hang", "restartScope": "All"}])
    decisions, _ = run(training_job, [_hang(0.0), _hang(1.0)])
    assert [(d.action, d.rule) for d in decisions] == [
        (Remedy.RESTART_IN_PLACE, "hang"),
        (Remedy.FAIL_JOB, "hang"),
    ]


def test_disabled_hang_handling_leaves_hangs_to_the_rules() -> None:
    training_job = job(
        {"worker": role(3, restartPolicy="OnNodeFail")}, hang={"enabled": False, "timeoutSeconds": 60}
    )
    decisions, state = run(training_job, [_hang(0.0)])
    assert (decisions[0].action, decisions[0].rule, decisions[0].counted) == (
        Remedy.RESTART,
        "restartPolicy",
        True,
    )
    assert state.pod(POD).consecutive_hangs == 0
