"""Small simulations with faults at chosen times, for exact expectations."""

from __future__ import annotations

from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.sim import Failure, FailureKind, RunResult, SimConfig, simulate
from trainguard.backends.sim.accounting import Cause
from trainguard.backends.sim.jobs import default_job

#: δ, R and τ of the exact scenarios: training [R, ...) in cycles of τ + δ = 110 s.
COST, RESTART, INTERVAL = 10.0, 50.0, 100.0


def config(*faults: tuple[float, int, FailureKind], **changes: Any) -> SimConfig:
    """Two worker nodes and one spare, the given faults, no launch throughput limit, one day."""
    settings: dict[str, Any] = {
        "gpus": 16,
        "gpus_per_node": 8,
        "checkpoint_cost": COST,
        "restart_cost": RESTART,
        "interval": INTERVAL,
        "days": 1.0,
        "spare_nodes": 1,
        "launch_rate": None,
        "trace": [Failure(at, node, kind) for at, node, kind in faults],
    }
    settings.update(changes)
    return SimConfig(**settings)


def job(**worker: Any) -> TrainingJob:
    """The default elastic job (2 workers) with changes to its worker role."""
    data = default_job(2)
    data["spec"]["replicaSpecs"]["worker"].update(worker)
    return TrainingJob.model_validate(data)


def run(
    *faults: tuple[float, int, FailureKind], job_: TrainingJob | None = None, **changes: Any
) -> RunResult:
    return simulate(job_, config(*faults, **changes))


def lost(result: RunResult) -> dict[Cause, float]:
    return dict(result.ledger().lost)
