"""``trainguard simulate``: a job at a scale no test machine has, with the real controller and policy engine,
on a simulated cluster with a virtual clock (docs/simulator.md)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trainguard.api import TrainingJob
from trainguard.api.model import MAX_REPLICAS, REPLICAS_LIMIT
from trainguard.backends.sim import plots
from trainguard.backends.sim.badnodes import BadNodeSettings
from trainguard.backends.sim.compare import MemoryCheckpoints, compare, compare_isolation
from trainguard.backends.sim.failures import DEFAULT_MIX, FailureKind, TraceError, parse_mix, read_trace
from trainguard.backends.sim.report import report, text
from trainguard.backends.sim.run import SimConfig, simulate
from trainguard.cli.errors import CliError
from trainguard.cli.verbs._jobfiles import add_overlay_argument, load_files


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="simulate a job of thousands of GPUs for days: goodput, time lost by cause, restarts",
        description="Run a job on a simulated cluster, with failures drawn from rates (or replayed from a "
        "trace), the real controller and policy engine, and a virtual clock. Prints the goodput (useful "
        "training time / wall time), the time lost by cause and the restarts by scope.",
    )
    parser.add_argument(
        "file", metavar="JOB.yaml", nargs="?", help="the job (any dialect); default: an elastic worker job"
    )
    size = parser.add_argument_group("the job and the cluster")
    size.add_argument("--gpus", type=_count, default=1024, metavar="N", help="GPUs of the job (1024)")
    size.add_argument(
        "--gpus-per-node", type=_count, default=8, metavar="G", help="GPUs per node: one worker pod each (8)"
    )
    size.add_argument(
        "--spare-nodes", type=_whole, metavar="K", help="idle GPU nodes (1%% of the job's, at least 1)"
    )
    size.add_argument(
        "--repair-hours",
        type=_positive,
        default=24.0,
        metavar="H",
        help="a lost node is back after H hours (24)",
    )
    size.add_argument(
        "--maintenance-hours",
        type=_positive,
        default=2.0,
        metavar="H",
        help="a node whose pod was evicted is drained for H hours (2)",
    )
    size.add_argument(
        "--launch-rate",
        type=_non_negative,
        default=100.0,
        metavar="P",
        help="pods created per second, 0: no limit (100)",
    )
    faults = parser.add_argument_group("faults")
    faults.add_argument(
        "--mtbf-hours",
        type=_positive,
        default=6334.0,
        metavar="M",
        help="mean time between failures of one node (6334: Llama 3's rate)",
    )
    faults.add_argument(
        "--failure-mix",
        type=_mix,
        metavar="MIX",
        help="shares of kinds, e.g. node=0.7,crash=0.15,hang=0.08,evict=0.07 (that)",
    )
    faults.add_argument(
        "--trace", metavar="CSV", help="replay failures (rows time,node,kind) instead of drawing them"
    )
    faults.add_argument("--seed", type=int, default=0, help="seed of the drawn failures (0)")
    faults.add_argument("--days", type=_positive, default=7.0, metavar="X", help="simulated days (7)")
    bad = parser.add_argument_group("bad nodes and the fault tolerance check")
    bad.add_argument(
        "--bad-node-share",
        type=_share,
        default=0.0,
        metavar="S",
        help="share of the GPU nodes whose hardware is faulty, e.g. 0.01 (0: none)",
    )
    bad.add_argument(
        "--bad-mtbf-hours",
        type=_positive,
        default=3.0,
        metavar="H",
        help="mean hours between failures of a bad node while a pod runs on it (3)",
    )
    bad.add_argument(
        "--bad-precheck-finds",
        type=_share,
        default=1.0,
        metavar="F",
        help="share of the bad nodes a pre-check finds; the rest are found when they fail (1)",
    )
    bad.add_argument(
        "--compare-isolation",
        action="store_true",
        help="also run the job with the fault tolerance check on (bad nodes isolated) and off, same faults",
    )
    costs = parser.add_argument_group("costs and delays, in seconds")
    costs.add_argument(
        "--checkpoint-cost-s",
        type=_non_negative,
        default=60.0,
        metavar="D",
        help="δ: writing a checkpoint (60)",
    )
    costs.add_argument(
        "--restart-cost-s",
        type=_non_negative,
        default=300.0,
        metavar="R",
        help="R: from all pods running to training again (300)",
    )
    costs.add_argument(
        "--interval-s", type=_positive, metavar="T", help="training between checkpoints (Young/Daly's √(2δM))"
    )
    costs.add_argument(
        "--node-detect-s", type=_non_negative, default=40.0, help="a lost node is seen NotReady after (40)"
    )
    costs.add_argument(
        "--crash-detect-s", type=_non_negative, default=1.0, help="a process exit is seen after (1)"
    )
    costs.add_argument(
        "--collective-timeout-s",
        type=_non_negative,
        default=600.0,
        help="without hang detection, a hang ends as a crash after (600)",
    )
    costs.add_argument(
        "--crash-exit-code",
        type=_exit_code,
        default=134,
        help="exit code of a crashed process (134, SIGABRT)",
    )
    costs.add_argument(
        "--memory-checkpoint-cost-s",
        type=_non_negative,
        metavar="D",
        help="--compare: δ of in-memory checkpoints (δ/10)",
    )
    costs.add_argument(
        "--memory-restart-cost-s",
        type=_non_negative,
        metavar="R",
        help="--compare: R with in-memory checkpoints (R/2)",
    )
    parser.add_argument(
        "--compare", action="store_true", help="also run the policies side by side on the same faults"
    )
    parser.add_argument(
        "--plot-dir", metavar="DIR", help="write timeline.png and goodput_vs_interval.png (and policies.png)"
    )
    add_overlay_argument(parser)
    parser.add_argument("--job", help="the job's name, when the file holds several")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = _config(args)
    job = _job(args) if args.file else None
    try:
        result = simulate(job, config)
        rows = compare(job, config, _memory(args, config), _progress) if args.compare else []
        if args.compare_isolation:
            rows += compare_isolation(job, config, _progress)
    except ValidationError as error:
        raise CliError(
            f"{args.file or 'the default job'}: cannot size the job to {config.nodes} worker pods: "
            f"{_first(error)}"
        ) from None
    paths: list[str] = []
    if args.plot_dir:
        directory = Path(args.plot_dir)
        if directory.exists() and not directory.is_dir():
            raise CliError(f"--plot-dir {args.plot_dir}: not a directory")
        paths = [str(path) for path in plots.draw_all(result, directory, rows)]
    print(json.dumps(report(result, rows, paths)) if args.output == "json" else text(result, rows, paths))
    return 0


def _config(args: argparse.Namespace) -> SimConfig:
    if args.gpus % args.gpus_per_node:
        raise CliError(
            f"--gpus {args.gpus} is not a multiple of --gpus-per-node {args.gpus_per_node}: "
            "a worker pod takes a whole node"
        )
    if args.gpus // args.gpus_per_node > MAX_REPLICAS:
        raise CliError(
            f"--gpus {args.gpus} at --gpus-per-node {args.gpus_per_node} makes "
            f"{args.gpus // args.gpus_per_node:,} worker pods (one per node); {REPLICAS_LIMIT}, "
            "or give each node more GPUs (--gpus-per-node)"
        )
    config = SimConfig(
        gpus=args.gpus,
        gpus_per_node=args.gpus_per_node,
        mtbf_hours=args.mtbf_hours,
        checkpoint_cost=args.checkpoint_cost_s,
        restart_cost=args.restart_cost_s,
        interval=args.interval_s,
        days=args.days,
        seed=args.seed,
        spare_nodes=args.spare_nodes,
        mix=args.failure_mix or dict(DEFAULT_MIX),
        node_detect=args.node_detect_s,
        crash_detect=args.crash_detect_s,
        collective_timeout=args.collective_timeout_s,
        repair_hours=args.repair_hours,
        maintenance_hours=args.maintenance_hours,
        crash_exit_code=args.crash_exit_code,
        launch_rate=args.launch_rate or None,
        bad_nodes=BadNodeSettings(args.bad_node_share, args.bad_mtbf_hours, args.bad_precheck_finds),
    )
    if args.compare_isolation and not config.bad_nodes.share:
        raise CliError("--compare-isolation needs bad nodes: give --bad-node-share, e.g. 0.01")
    if not args.trace:
        return config
    try:
        trace = read_trace(args.trace, config.nodes + config.spares)
    except TraceError as error:
        raise CliError(str(error)) from None
    late = sum(1 for failure in trace if failure.at >= config.horizon)
    if late:
        print(f"warning: {args.trace}: {late} failures after day {args.days:g} are left out", file=sys.stderr)
    return replace(config, trace=trace)


def _memory(args: argparse.Namespace, config: SimConfig) -> MemoryCheckpoints:
    default = MemoryCheckpoints.default_for(config)
    return MemoryCheckpoints(
        args.memory_checkpoint_cost_s
        if args.memory_checkpoint_cost_s is not None
        else default.checkpoint_cost,
        args.memory_restart_cost_s if args.memory_restart_cost_s is not None else default.restart_cost,
    )


def _job(args: argparse.Namespace) -> TrainingJob:
    jobs = [loaded.job for loaded in load_files([args.file], args.overlay)]
    if args.job is not None:
        chosen = [job for job in jobs if job.name == args.job]
        if not chosen:
            names = ", ".join(job.name for job in jobs)
            raise CliError(f"{args.file}: no job named {args.job!r}; it holds {names}")
        return chosen[0]
    if len(jobs) > 1:
        names = ", ".join(job.name for job in jobs)
        raise CliError(f"{args.file} holds {len(jobs)} jobs ({names}); choose one with --job NAME")
    return jobs[0]


def _progress(policy: str) -> None:
    if sys.stderr.isatty():
        print(f"simulating: {policy} ...", file=sys.stderr, flush=True)


def _first(error: ValidationError) -> str:
    problem = error.errors()[0]
    return str(problem.get("msg", error)).removeprefix("Value error, ")


# ---- argument types ---------------------------------------------------------------------------------------


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be above 0")
    return value


def _non_negative(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value


def _share(text: str) -> float:
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a share from 0 to 1")
    return value


def _whole(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _count(text: str) -> int:
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _exit_code(text: str) -> int:
    value = _count(text)
    if value > 255:
        raise argparse.ArgumentTypeError(f"{value}: exit codes of a failure are 1-255")
    return value


def _mix(text: str) -> dict[FailureKind, float]:
    try:
        return parse_mix(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
