"""One fault at a known time, with the real controller deciding: where the time goes, to the second.

Two workers (one per node), one spare node; δ 10 s, R 50 s, τ 100 s, so training runs in cycles of 110 s
from t = 50 (the first start costs R too). A fault at t = 1000 is 950 s into training: 8 checkpoints done,
70 s of rework lost.
"""

from __future__ import annotations

import pytest

from trainguard.backends.sim.accounting import Cause
from trainguard.backends.sim.failures import FailureKind
from trainguard.backends.sim.jobs import elastic, with_hang_detection, with_scope

from .helpers import job, lost, run

CRASH, NODE, HANG, EVICT = FailureKind.CRASH, FailureKind.NODE, FailureKind.HANG, FailureKind.EVICT


def expect(result_lost: dict[Cause, float], **seconds: float) -> None:
    for name, value in seconds.items():
        assert result_lost[Cause(name)] == pytest.approx(value, abs=1e-6), name


def test_a_crash_is_detected_restarted_with_scope_pod_and_costs_its_rework() -> None:
    result = run((1000.0, 0, CRASH))
    expect(lost(result), startup=50, rework=70, detection=1, restart=51, waiting_for_capacity=0)
    assert result.restarts()["Pod"] == 1
    (fault,) = [entry for entry in result.history if entry.kind == "fault"]
    assert (fault.pod, fault.fault, fault.exit_code, fault.action) == (
        "llm-worker-0",
        "Exited",
        134,
        "restart",
    )
    assert result.goodput == pytest.approx(result.ledger().useful / 86400)


def test_the_same_crash_at_scope_all_waits_for_the_healthy_pod_to_stop() -> None:
    result = run((1000.0, 0, CRASH), job_=with_scope(job(), "All"))
    expect(lost(result), rework=70, detection=1, restart=80)  # the grace period (30 s), then R
    assert result.restarts()["All"] == 1


def test_a_lost_node_is_seen_after_40_s_and_its_pod_moves_to_the_spare() -> None:
    result = run((1000.0, 0, NODE))
    expect(lost(result), rework=70, detection=40, restart=51, waiting_for_capacity=0)
    (fault,) = [entry for entry in result.history if entry.kind == "fault"]
    assert (fault.fault, fault.rule, fault.node) == ("NodeNotReady", "faultTolerantPolicy[0]", "node-0")


def test_without_a_spare_the_replacement_waits_for_the_repair() -> None:
    result = run((1000.0, 0, NODE), spare_nodes=0, repair_hours=1.0)
    expect(lost(result), detection=40, restart=51, waiting_for_capacity=4600 - 1041)


def test_an_elastic_job_shrinks_instead_of_waiting_and_grows_back_after_the_repair() -> None:
    result = run((1000.0, 0, NODE), job_=elastic(job()), spare_nodes=0, repair_hours=1.0)
    # shrunk: trains on one of two workers from 1090 to the repair at 4600, then saves and restarts
    expect(lost(result), detection=40, restart=100, waiting_for_capacity=0, shrunk=1600)
    assert lost(result)[Cause.CHECKPOINTING] >= 10
    assert (result.restarts()["shrink"], result.restarts()["grow"]) == (1, 1)
    fractions = [segment.fraction for segment in result.segments]
    assert fractions == [1.0, 0.5, 1.0]


def test_a_hang_is_detected_by_the_agent_and_restarted_in_place() -> None:
    result = run((1000.0, 0, HANG))
    expect(lost(result), rework=70, detection=300, restart=80)  # hang.timeoutSeconds; the grace, then R
    assert result.restarts()["InPlace"] == 1
    assert result.restarts()["Pod"] == 0


def test_without_hang_detection_a_hang_lasts_until_the_collective_times_out() -> None:
    result = run((1000.0, 0, HANG), job_=with_hang_detection(job(), None))
    expect(lost(result), rework=70, detection=601, restart=51)
    assert result.restarts()["Pod"] == 1


def test_an_eviction_saves_within_its_grace_period_and_loses_no_work() -> None:
    result = run((1000.0, 0, EVICT))
    expect(lost(result), rework=0, detection=0, restart=51)
    assert lost(result)[Cause.CHECKPOINTING] == pytest.approx(80 + 10 + 7750, abs=1e-6)


def test_an_eviction_whose_checkpoint_does_not_fit_the_grace_period_loses_work() -> None:
    result = run((1000.0, 0, EVICT), checkpoint_cost=60.0)
    expect(lost(result), rework=100, detection=30)


def test_when_the_restart_limit_is_spent_the_job_fails_and_the_rest_is_lost() -> None:
    fixed = job(restartLimit=1, failPolicy="Any", minReplicas=2)
    result = run((1000.0, 0, CRASH), (5000.0, 1, CRASH), job_=fixed)
    assert result.phase.value == "Failed"
    expect(lost(result), job_failed=86400 - 5001)


def test_faults_of_nodes_without_a_pod_cost_nothing() -> None:
    result = run((1000.0, 2, CRASH), (2000.0, 2, HANG))
    expect(lost(result), rework=0, detection=0, restart=0)
    assert result.interruptions() == {}
