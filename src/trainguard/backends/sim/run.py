"""One simulation: a job of N GPUs on nodes of G GPUs (plus spares), faults for X days, the real controller.

``simulate(job, config)`` returns a ``RunResult``: the training segments and the time lost by cause (from
which the goodput of any checkpoint interval follows), every fault and every decision of the controller.
"""

from __future__ import annotations

import gc
import math
import random
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from trainguard.api import TrainingJob
from trainguard.backends.sim.accounting import Cause, Ledger, Segment, goodput_curve, ledger, log_grid
from trainguard.backends.sim.badnodes import BadNodes, BadNodeSettings, install
from trainguard.backends.sim.clock import VirtualClock
from trainguard.backends.sim.cluster import SimCluster
from trainguard.backends.sim.engine import Engine, FaultRecord
from trainguard.backends.sim.failures import DEFAULT_MIX, Failure, FailureKind, drawn
from trainguard.backends.sim.jobs import default_job, sized, worker_role
from trainguard.backends.sim.pods import CPU_POOL, GPU_POOL
from trainguard.backends.sim.theory import goodput_at_optimum, job_mtbf, renewal_goodput, young_daly_interval
from trainguard.backends.sim.timing import ABORT_EXIT_CODE, Timing
from trainguard.controller import HistoryEntry, JobPhase

DAY = 86400.0
HOUR = 3600.0
#: Intervals searched for the best one: from τ*/SEARCH_SPAN to τ*·SEARCH_SPAN.
SEARCH_SPAN = 8.0
SEARCH_POINTS = 241


@dataclass(frozen=True)
class SimConfig:
    gpus: int = 1024
    gpus_per_node: int = 8
    #: Mean time between failures of one node, in hours.
    mtbf_hours: float = 6334.0
    #: δ and R, in seconds.
    checkpoint_cost: float = 60.0
    restart_cost: float = 300.0
    #: Seconds of training between checkpoints (None: Young/Daly's τ* for this job).
    interval: float | None = None
    days: float = 7.0
    seed: int = 0
    #: Idle GPU nodes (None: 1% of the job's nodes, at least one).
    spare_nodes: int | None = None
    mix: Mapping[FailureKind, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    #: Replayed instead of drawn.
    trace: Sequence[Failure] | None = None
    node_detect: float = 40.0
    crash_detect: float = 1.0
    collective_timeout: float = 600.0
    grace: float = 30.0
    repair_hours: float = 24.0
    #: A node drained for maintenance (its pod evicted) is back after this.
    maintenance_hours: float = 2.0
    crash_exit_code: int = ABORT_EXIT_CODE
    #: Pods created per second (None: no limit).
    launch_rate: float | None = 100.0
    #: Bad nodes (their share, failures, what a pre-check finds): ``badnodes``; none by default.
    bad_nodes: BadNodeSettings = field(default_factory=BadNodeSettings)

    def __post_init__(self) -> None:
        checks = {
            "gpus": self.gpus >= 1,
            "gpus_per_node": self.gpus_per_node >= 1,
            "mtbf_hours": self.mtbf_hours > 0,
            "checkpoint_cost": self.checkpoint_cost >= 0,
            "restart_cost": self.restart_cost >= 0,
            "interval": self.interval is None or self.interval > 0,
            "days": self.days > 0,
            "spare_nodes": self.spare_nodes is None or self.spare_nodes >= 0,
            "repair_hours": self.repair_hours > 0,
            "maintenance_hours": self.maintenance_hours > 0,
        }
        wrong = [name for name, ok in checks.items() if not ok]
        if wrong:
            raise ValueError(f"out of range: {', '.join(wrong)}")

    @property
    def nodes(self) -> int:
        """GPU nodes the job needs (one worker pod each)."""
        return math.ceil(self.gpus / self.gpus_per_node)

    @property
    def spares(self) -> int:
        return self.spare_nodes if self.spare_nodes is not None else max(1, math.ceil(self.nodes / 100))

    @property
    def horizon(self) -> float:
        return self.days * DAY

    @property
    def job_mtbf(self) -> float:
        """M: the job's MTBF in seconds (a failure of any of its nodes interrupts it)."""
        return job_mtbf(self.mtbf_hours * HOUR, self.nodes)

    @property
    def young_daly(self) -> float:
        return young_daly_interval(self.checkpoint_cost, self.job_mtbf)

    @property
    def chosen_interval(self) -> float:
        """The interval asked for, else τ* (at least a second: with free checkpoints, checkpoint often)."""
        return self.interval if self.interval is not None else max(self.young_daly, 1.0)

    def timing(self) -> Timing:
        return Timing(
            checkpoint_cost=self.checkpoint_cost,
            restart_cost=self.restart_cost,
            node_detect=self.node_detect,
            crash_detect=self.crash_detect,
            collective_timeout=self.collective_timeout,
            grace=self.grace,
            repair=self.repair_hours * HOUR,
            maintenance=self.maintenance_hours * HOUR,
            crash_exit_code=self.crash_exit_code,
        )


@dataclass(frozen=True)
class RunResult:
    config: SimConfig
    job: TrainingJob
    wall: float
    segments: tuple[Segment, ...]
    down: Mapping[Cause, float]
    down_spans: tuple[tuple[float, float, Cause], ...]
    faults: tuple[FaultRecord, ...]
    history: tuple[HistoryEntry, ...]
    reconciles: int
    phase: JobPhase
    ended_at: float | None
    #: The bad nodes, the nodes isolated at the end, the bad nodes' failures that hit the job (by how they
    #: were found: ``pre``, ``periodic``, ``post``, or ``plain`` with the check off) and pods issued again.
    bad_nodes: tuple[str, ...] = ()
    isolated: tuple[str, ...] = ()
    bad_faults: Mapping[str, int] = field(default_factory=dict)
    reissues: int = 0

    @property
    def interval(self) -> float:
        return self.config.chosen_interval

    def ledger(self, interval: float | None = None) -> Ledger:
        tau = self.interval if interval is None else interval
        return ledger(self.segments, self.down, self.wall, tau, self.config.checkpoint_cost)

    @property
    def goodput(self) -> float:
        return self.ledger().goodput

    def curve(self, low: float, high: float, points: int) -> list[tuple[float, float]]:
        grid = log_grid(low, high, points)
        return goodput_curve(self.segments, self.down, self.wall, grid, self.config.checkpoint_cost)

    def search_center(self) -> float:
        """Where to look for the best interval: τ* for the MTBF this run saw (a trace has its own)."""
        hits = sum(self.interruptions().values())
        mtbf = self.wall / hits if hits else self.config.job_mtbf
        return max(young_daly_interval(self.config.checkpoint_cost, mtbf), 1.0)

    def best_interval(self) -> tuple[float, float]:
        """The interval with the highest goodput on this run's faults, and that goodput."""
        center = self.search_center()
        points = self.curve(center / SEARCH_SPAN, center * SEARCH_SPAN, SEARCH_POINTS)
        return max(points, key=lambda point: point[1])

    def interruptions(self) -> Counter[str]:
        """Faults that hit a pod of the job, by kind."""
        return Counter(fault.kind.value for fault in self.faults if fault.pod is not None)

    def restarts(self) -> dict[str, int]:
        """Restarts decided by the controller: by scope (Pod, Replica, All), in place, shrinks, grows."""
        counts = {"Pod": 0, "Replica": 0, "All": 0, "InPlace": 0, "shrink": 0, "grow": 0}
        for entry in self.history:
            if entry.kind == "grow":
                counts["grow"] += 1
            elif entry.kind != "fault":
                continue
            elif entry.action == "restart" and entry.scope is not None:
                counts[entry.scope] += 1
            elif entry.action == "restart-in-place":
                counts["InPlace"] += 1
            elif entry.action == "shrink":
                counts["shrink"] += 1
        return counts

    def theory(self) -> dict[str, float]:
        """Young/Daly's first-order figures, and the exact expectation of the same model (``renewal``)."""
        config = self.config
        cost, restart, mtbf = config.checkpoint_cost, config.restart_cost, config.job_mtbf
        star = max(config.young_daly, 1.0)
        return {
            "job_mtbf_s": mtbf,
            "young_daly_interval_s": config.young_daly,
            "goodput_at_young_daly": goodput_at_optimum(cost, restart, mtbf),
            "renewal_goodput_at_young_daly": renewal_goodput(star, cost, restart, mtbf),
        }


def simulate(job: TrainingJob | None, config: SimConfig) -> RunResult:
    """Run ``job`` (None: the default elastic job) under ``config``'s faults with the real controller."""
    workers = config.nodes
    base = sized(job if job is not None else TrainingJob.model_validate(default_job(workers)), workers)
    role = worker_role(base)
    others = {name: spec for name, spec in base.spec.replica_specs.items() if name != role}
    clock = VirtualClock()
    cluster = SimCluster.build(
        clock,
        {GPU_POOL: workers + config.spares, CPU_POOL: sum(spec.max_count for spec in others.values())},
        dict.fromkeys(others, CPU_POOL),
        launch_rate=config.launch_rate,
        stop_seconds=config.grace,
    )
    engine = Engine(base, cluster, config.timing(), role)
    gpu_nodes = [node.name for node in cluster.nodes.values() if node.pool == GPU_POOL]
    _feed(engine, clock, gpu_nodes, _failures(config, len(gpu_nodes)))
    bad: BadNodes | None = install(engine, gpu_nodes, config.bad_nodes, config.seed, config.horizon)
    with _collector_paused():
        engine.start()
        engine.run_until(config.horizon)
        engine.finish()
    ended = engine.ended_at if engine.status.phase is JobPhase.SUCCEEDED else None
    return RunResult(
        config=config,
        job=base,
        wall=ended if ended is not None else config.horizon,
        segments=tuple(engine.segments),
        down=dict(engine.down),
        down_spans=tuple(engine.down_spans),
        faults=tuple(engine.faults),
        history=tuple(engine.history),
        reconciles=engine.reconciles,
        phase=engine.status.phase,
        ended_at=engine.ended_at,
        bad_nodes=bad.nodes if bad is not None else (),
        isolated=tuple(sorted(cluster.isolated)),
        bad_faults=dict(bad.counts) if bad is not None else {},
        reissues=engine.status.fault_check.reissues if engine.status.fault_check is not None else 0,
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off for the run, then one collection.

    A run allocates fast (a status of thousands of pods per reconcile) and keeps a large heap alive (the
    cluster, the latest status), so the collector would walk that heap again and again: a quarter of a
    16k-GPU run's time, to find a few hundred objects in cycles. Reference counting still frees everything
    else at once, and whatever cycles the run leaves are collected at its end.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.collect()


def _failures(config: SimConfig, nodes: int) -> Iterator[Failure]:
    if config.trace is not None:
        return (failure for failure in config.trace if failure.at < config.horizon)
    rng = random.Random(config.seed)
    return drawn(rng, nodes, config.mtbf_hours * HOUR, config.mix, config.horizon)


def _feed(engine: Engine, clock: VirtualClock, names: list[str], failures: Iterator[Failure]) -> None:
    """Schedule the failures one at a time (the heap stays small however many there are)."""

    def next_one() -> None:
        failure = next(failures, None)
        if failure is not None:
            clock.at(failure.at, lambda: happen(failure))

    def happen(failure: Failure) -> None:
        engine.fail(names[failure.node], failure.kind)
        next_one()

    next_one()
