"""The simulator against theory: with exponential failures of MTBF M (the per-node MTBF over the job's
nodes), goodput at Young/Daly's interval τ* = √(2δM) is within 1% of 1 - √(2δ/M) - R/M, and the best
simulated interval is within 10% of τ*.

Two nodes of 8 h MTBF (M = 4 h), δ 30 s, R 120 s, faults seen at once: τ* = 930 s, theory 92.7% (first
order; the exact expectation of the model is 92.9%). Thousands of faults, so that the noise is well under the
tolerances (sd about 0.15% on the goodput and 1% on the fitted best interval, measured over seeds).
"""

from __future__ import annotations

import functools

import pytest

from trainguard.backends.sim import FailureKind, RunResult, SimConfig, simulate
from trainguard.backends.sim.fit import fitted_best_interval


@functools.cache  # one run per kind, shared by the tests
def run(kind: FailureKind, days: float) -> RunResult:
    config = SimConfig(
        gpus=16,
        gpus_per_node=8,
        mtbf_hours=8.0,
        checkpoint_cost=30.0,
        restart_cost=120.0,
        days=days,
        seed=1,
        mix={kind: 1.0},
        crash_detect=0.0,
        node_detect=0.0,
        spare_nodes=2,
        repair_hours=1.0,
    )
    return simulate(None, config)


@pytest.mark.parametrize(("kind", "days"), [(FailureKind.CRASH, 400.0), (FailureKind.NODE, 300.0)])
def test_goodput_and_the_best_interval_agree_with_young_and_daly(kind: FailureKind, days: float) -> None:
    result = run(kind, days)
    config = result.config
    assert config.job_mtbf == pytest.approx(4 * 3600.0)
    assert config.young_daly == pytest.approx(929.5, abs=0.1)
    assert sum(result.interruptions().values()) > 1500
    theory = result.theory()["goodput_at_young_daly"]
    assert theory == pytest.approx(0.9271, abs=1e-4)
    assert result.ledger(config.young_daly).goodput == pytest.approx(theory, rel=0.01)
    assert fitted_best_interval(result) == pytest.approx(config.young_daly, rel=0.10)
    assert result.best_interval()[0] == pytest.approx(config.young_daly, rel=0.10)


def test_crashes_match_the_exact_expectation_of_the_model_closely() -> None:
    """Crashes seen at once on nodes that stay up are exactly the renewal model: failures destroy the work
    since the last checkpoint, and a failure while recovering starts the recovery over."""
    result = run(FailureKind.CRASH, 400.0)
    exact = result.theory()["renewal_goodput_at_young_daly"]
    assert exact == pytest.approx(0.9290, abs=1e-4)
    # R is 120 s plus the 1 s backoff before each relaunch
    assert result.ledger(result.config.young_daly).goodput == pytest.approx(exact, rel=0.005)
