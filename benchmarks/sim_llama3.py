"""The simulator at Llama 3 scale: 16,384 GPUs on 2,048 nodes of 8, 54 days, about 419 unexpected
interruptions (Meta's Llama 3 report: 419 in a 54-day snapshot of pre-training), with the real controller
and policy engine deciding every fault.

Per-node MTBF = 54 days x 24 h x 2,048 nodes / 419 = 6,334 h, so the job's MTBF is M = 3.09 h. Checkpoint
cost δ and restart cost R are assumptions (the report gives neither): 30 s and 300 s by default, for which
Young/Daly's goodput is the "higher than 90% effective training time" the report states.

Two runs on the same seed:
- ``theory``: only node losses, seen at once (the conditions of Young/Daly's model): the goodput at
  τ* = √(2δM) against 1 - √(2δ/M) - R/M (target: within 1%), also with M as this run saw it (its own number
  of faults) and against the model's exact expectation, and the best simulated interval (fitted, and the
  highest point) against τ* (target: within 10%);
- ``realistic``: Llama 3's mix of kinds (node 70%, crash 15%, hang 8%, eviction 7%), Kubernetes' detection
  delays, hang detection after 5 minutes, 1% spare nodes repaired in 24 h: goodput and time lost by cause.

Each prints its figures and how long it took here (``elapsed_s``, ``cpu_s``, ``reconciles``, CPU seconds per
reconcile, and the machine's 1-minute load average at the end of the run: on a shared machine the wall time
depends on it, the CPU time much less).
The last line printed is one JSON object of them all.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from trainguard.backends.sim import FailureKind, RunResult, SimConfig, simulate
from trainguard.backends.sim.fit import fitted_best_interval
from trainguard.backends.sim.report import summary
from trainguard.backends.sim.theory import goodput_at_optimum, renewal_goodput

LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54.0


def node_mtbf_hours(gpus: int, gpus_per_node: int, interruptions: float, days: float) -> float:
    return days * 24 * (gpus // gpus_per_node) / interruptions


def timed(config: SimConfig) -> tuple[RunResult, float, float]:
    """The run, its wall time and its CPU time (the machine may be shared: CPU time is the steadier)."""
    started, cpu = time.perf_counter(), time.process_time()
    result = simulate(None, config)
    return result, time.perf_counter() - started, time.process_time() - cpu


def theory_figures(result: RunResult, elapsed: float, cpu: float) -> dict[str, Any]:
    config = result.config
    theory = result.theory()
    simulated = result.ledger(config.young_daly).goodput
    expected = theory["goodput_at_young_daly"]
    hits = sum(result.interruptions().values())
    seen_mtbf = result.wall / hits
    cost, restart = config.checkpoint_cost, config.restart_cost
    fitted = fitted_best_interval(result)
    highest, _ = result.best_interval()
    return {
        "interruptions": hits,
        "job_mtbf_h": round(config.job_mtbf / 3600, 3),
        "tau_star_s": round(config.young_daly, 1),
        "goodput_at_tau_star": round(simulated, 5),
        "theory_goodput": round(expected, 5),
        "goodput_rel_error": round(simulated / expected - 1, 5),
        "goodput_within_1pct": abs(simulated / expected - 1) <= 0.01,
        "theory_goodput_seen_mtbf": round(goodput_at_optimum(cost, restart, seen_mtbf), 5),
        "goodput_rel_error_seen_mtbf": round(simulated / goodput_at_optimum(cost, restart, seen_mtbf) - 1, 5),
        "exact_goodput": round(theory["renewal_goodput_at_young_daly"], 5),
        "exact_goodput_seen_mtbf": round(renewal_goodput(config.young_daly, cost, restart, seen_mtbf), 5),
        "best_interval_fitted_s": round(fitted, 1),
        "best_interval_highest_s": round(highest, 1),
        "best_over_tau_star": round(fitted / config.young_daly, 4),
        "best_within_10pct": abs(fitted / config.young_daly - 1) <= 0.10,
        **speed(result, elapsed, cpu),
    }


def speed(result: RunResult, elapsed: float, cpu: float) -> dict[str, Any]:
    return {
        "elapsed_s": round(elapsed, 1),
        "cpu_s": round(cpu, 1),
        "reconciles": result.reconciles,
        "cpu_s_per_reconcile": round(cpu / max(result.reconciles, 1), 4),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=16384)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--days", type=float, default=LLAMA3_DAYS)
    parser.add_argument("--checkpoint-cost-s", type=float, default=30.0)
    parser.add_argument("--restart-cost-s", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=("theory", "realistic"), help="run one of the two")
    args = parser.parse_args()

    mtbf = node_mtbf_hours(args.gpus, args.gpus_per_node, LLAMA3_INTERRUPTIONS, LLAMA3_DAYS)
    common = {
        "gpus": args.gpus,
        "gpus_per_node": args.gpus_per_node,
        "mtbf_hours": mtbf,
        "checkpoint_cost": args.checkpoint_cost_s,
        "restart_cost": args.restart_cost_s,
        "days": args.days,
        "seed": args.seed,
    }
    figures: dict[str, Any] = {
        "gpus": args.gpus,
        "nodes": args.gpus // args.gpus_per_node,
        "days": args.days,
        "node_mtbf_h": round(mtbf, 1),
        "expected_interruptions": round(LLAMA3_INTERRUPTIONS * args.days / LLAMA3_DAYS, 1),
        "checkpoint_cost_s": args.checkpoint_cost_s,
        "restart_cost_s": args.restart_cost_s,
    }
    if args.only in (None, "theory"):
        config = SimConfig(**common, mix={FailureKind.NODE: 1.0}, node_detect=0.0)
        result, elapsed, cpu = timed(config)
        figures["theory"] = theory_figures(result, elapsed, cpu)
        print("theory:", json.dumps(figures["theory"]), flush=True)
    if args.only in (None, "realistic"):
        result, elapsed, cpu = timed(SimConfig(**common))
        figures["realistic"] = {**summary(result), **speed(result, elapsed, cpu)}
        print("realistic:", json.dumps(figures["realistic"]), flush=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
