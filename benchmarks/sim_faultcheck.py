"""Goodput with and without the fault tolerance check's isolation, in the simulator: 16,384 GPUs on 2,048 nodes
of 8, 1 % of the GPU nodes bad (each fails the pod on it every 3 h on average), 7 days, the real controller
and policy engine deciding every fault (docs/simulator.md, "Bad nodes and isolation").

Every node also fails as in ``benchmarks/sim_llama3.py`` (Llama 3's rate and mix: node MTBF 6,334 h), with
δ = 30 s and R = 300 s. Each scenario runs the same job twice on the same faults and the same bad nodes: with
the check on (bad nodes found by the simulated agent's checks and isolated; the job's isolation limits opened
up to the cluster's share, ``jobs.ISOLATION_LIMITS``) and off (the same failures are plain exits and hangs):
- ``spares_3pct``: 62 spare nodes (3 %), every bad node found by a pre-check;
- ``spares_3pct_found_running``: the same, but a pre-check finds only half the bad nodes; the others are found
  when they fail while a pod runs there (periodic and post-checks);
- ``spares_1pct``: the simulator's default 1 % spares (21), as many as the bad nodes: isolating them leaves
  no spare, and a lost node's pod then waits for its repair (24 h);
- ``spares_1pct_elastic``: the same cluster with a job that shrinks instead of waiting (and grows back).

Prints each scenario's figures as it ends; the last line is one JSON object of them all, also kept under
``benchmarks/results/`` with the commit, the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.sim import SimConfig
from trainguard.backends.sim.badnodes import BadNodeSettings
from trainguard.backends.sim.compare import compare_isolation
from trainguard.backends.sim.jobs import default_job, elastic, with_scope
from trainguard.backends.sim.report import summary

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import keep, machine

LLAMA3_NODE_MTBF_H = 6334.0


def scenario(job: TrainingJob | None, config: SimConfig) -> dict[str, Any]:
    started, cpu = time.perf_counter(), time.process_time()
    on, off = (row.result for row in compare_isolation(job, config))
    figures: dict[str, Any] = {
        "spare_nodes": config.spares,
        "bad_nodes": len(on.bad_nodes),
        "precheck_finds": config.bad_nodes.precheck_finds,
        "goodput_on": round(on.goodput, 4),
        "goodput_off": round(off.goodput, 4),
        "goodput_gain": round(on.goodput - off.goodput, 4),
        "isolated_nodes_on": len(on.isolated),
        "bad_node_faults_on": dict(sorted(on.bad_faults.items())),
        "bad_node_faults_off": dict(sorted(off.bad_faults.items())),
        "reissues_on": on.reissues,
        "interruptions_on": sum(on.interruptions().values()),
        "interruptions_off": sum(off.interruptions().values()),
        "phase_on": on.phase.value,
        "phase_off": off.phase.value,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
    }
    figures["raw"] = {"on": summary(on), "off": summary(off)}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=16384)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--bad-node-share", type=float, default=0.01)
    parser.add_argument("--bad-mtbf-hours", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", help="directory for the raw JSON (default benchmarks/results)")
    args = parser.parse_args()

    nodes = args.gpus // args.gpus_per_node
    base = SimConfig(
        gpus=args.gpus,
        gpus_per_node=args.gpus_per_node,
        mtbf_hours=LLAMA3_NODE_MTBF_H,
        checkpoint_cost=30.0,
        restart_cost=300.0,
        days=args.days,
        seed=args.seed,
    )
    three = max(1, round(nodes * 0.03))

    def bad(finds: float) -> BadNodeSettings:
        return BadNodeSettings(args.bad_node_share, args.bad_mtbf_hours, finds)

    plans: list[tuple[str, TrainingJob | None, SimConfig]] = [
        ("spares_3pct", None, replace(base, spare_nodes=three, bad_nodes=bad(1.0))),
        (
            "spares_3pct_found_running",
            None,
            replace(base, spare_nodes=three, bad_nodes=bad(0.5)),
        ),
        ("spares_1pct", None, replace(base, bad_nodes=bad(1.0))),
        (
            "spares_1pct_elastic",
            elastic(with_scope(TrainingJob.model_validate(default_job(nodes)), "Pod")),
            replace(base, bad_nodes=bad(1.0)),
        ),
    ]
    figures: dict[str, Any] = {
        "gpus": args.gpus,
        "nodes": nodes,
        "days": args.days,
        "node_mtbf_h": LLAMA3_NODE_MTBF_H,
        "bad_node_share": args.bad_node_share,
        "bad_mtbf_h": args.bad_mtbf_hours,
        "checkpoint_cost_s": 30.0,
        "restart_cost_s": 300.0,
        "seed": args.seed,
    }
    for name, job, config in plans:
        figures[name] = scenario(job, config)
        shown = {key: value for key, value in figures[name].items() if key != "raw"}
        print(f"{name}:", json.dumps(shown), flush=True)
    figures["machine"] = machine()
    path = keep("sim_faultcheck", figures, args.results)
    print(f"kept {path}", flush=True)
    short = {
        key: {k: v for k, v in value.items() if k != "raw"} if isinstance(value, dict) else value
        for key, value in figures.items()
        if key != "machine"
    }
    print(json.dumps({**short, "kept": str(path)}))


if __name__ == "__main__":
    main()
