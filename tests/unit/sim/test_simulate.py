"""Whole runs: sizing the job, determinism, every second accounted for, traces, the policies compared."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.policy.jobs import CCE_JOB
from trainguard.api import TrainingJob
from trainguard.api.load import load_jobs
from trainguard.backends.sim import FailureKind, SimConfig, simulate
from trainguard.backends.sim.compare import compare
from trainguard.backends.sim.jobs import default_job, sized, worker_role

from .helpers import config


def cce_job() -> TrainingJob:
    return load_jobs(CCE_JOB)[0].job


def test_the_worker_role_gets_one_pod_per_node_and_keeps_its_share_of_elasticity() -> None:
    job = sized(cce_job(), 64)
    assert worker_role(job) == "trainer"
    trainer = job.spec.replica_specs["trainer"]
    assert (trainer.replicas, trainer.min_replicas, trainer.max_replicas) == (64, 13, 64)  # min 1 of max 5
    assert job.spec.replica_specs["launcher"].replicas == 1
    assert job.metadata.uid


def test_the_default_job_is_an_elastic_worker_job_with_hang_detection() -> None:
    job = TrainingJob.model_validate(default_job(8))
    worker = job.spec.replica_specs["worker"]
    assert (worker.replicas, worker.min_count, worker.max_count) == (8, 4, 8)
    assert job.spec.hang is not None
    assert job.spec.hang.enabled


def test_a_run_is_decided_by_its_seed() -> None:
    settings_ = SimConfig(gpus=64, mtbf_hours=200.0, days=5.0, seed=7)
    first, again = simulate(None, settings_), simulate(None, settings_)
    assert first.faults == again.faults
    assert first.history == again.history
    assert first.goodput == again.goodput
    other = simulate(None, SimConfig(gpus=64, mtbf_hours=200.0, days=5.0, seed=8))
    assert other.faults != first.faults


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    nodes=st.integers(1, 6),
    spares=st.integers(0, 2),
    mix=st.dictionaries(st.sampled_from(list(FailureKind)), st.floats(0.1, 1.0), min_size=1),
    scope=st.sampled_from(["Pod", "All"]),
)
def test_every_second_of_any_run_is_useful_or_lost_to_a_cause(
    seed: int, nodes: int, spares: int, mix: dict[FailureKind, float], scope: str
) -> None:
    data = default_job(nodes)
    data["spec"]["replicaSpecs"]["worker"]["restartScope"] = scope
    settings_ = SimConfig(
        gpus=8 * nodes, mtbf_hours=30.0, days=4.0, seed=seed, spare_nodes=spares, mix=mix, repair_hours=6.0
    )
    result = simulate(TrainingJob.model_validate(data), settings_)
    ledger = result.ledger()
    assert ledger.useful + sum(ledger.lost.values()) == pytest.approx(settings_.horizon, rel=1e-9)
    assert all(seconds >= 0 for seconds in ledger.lost.values())
    assert sum(result.interruptions().values()) <= len(result.faults)


def test_a_trace_is_replayed_at_its_times() -> None:
    result = simulate(None, config((500.0, 1, FailureKind.CRASH), (9000.0, 0, FailureKind.NODE)))
    assert [(fault.at, fault.kind, fault.node, fault.pod) for fault in result.faults] == [
        (500.0, FailureKind.CRASH, "node-1", "llm-worker-1"),
        (9000.0, FailureKind.NODE, "node-0", "llm-worker-0"),
    ]
    assert [fault.detected_at for fault in result.faults] == [501.0, 9040.0]


def test_policies_are_compared_on_the_same_faults() -> None:
    rows = compare(cce_job(), SimConfig(gpus=64, mtbf_hours=100.0, days=3.0, seed=3))
    assert [row.policy for row in rows] == [
        "as written",
        "Pod-scope restart",
        "All-scope restart",
        "elastic shrink-and-grow",
        "Pod-scope, hang detection (300 s)",
        "Pod-scope, in-memory checkpoints",
    ]
    assert len({tuple((f.at, f.node) for f in row.result.faults) for row in rows}) == 1
    by_policy = {row.policy: row.result for row in rows}
    assert by_policy["Pod-scope restart"].restarts()["All"] == 0
    assert by_policy["All-scope restart"].restarts()["All"] > 0
    memory = by_policy["Pod-scope, in-memory checkpoints"]
    assert memory.config.checkpoint_cost == pytest.approx(6.0)
    assert memory.goodput > by_policy["Pod-scope restart"].goodput
