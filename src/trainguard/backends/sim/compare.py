"""Policies side by side, on the same faults (same seed or trace): the table that tells a team which to choose.

Rows: the job as written (when one was given), Pod-scope restart, All-scope restart, elastic shrink-and-grow,
hang detection the other way round from the job (off when it has it, on when it has not), and in-memory
checkpoints (a cheaper checkpoint and a faster restore; the interval scaled by √(δ'/δ), which keeps it at
Young/Daly's when it was). Every row but the first restarts with scope Pod unless it says otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from trainguard.api import TrainingJob
from trainguard.backends.sim.jobs import (
    DEFAULT_HANG_TIMEOUT,
    ISOLATION_LIMITS,
    default_job,
    elastic,
    with_fault_check,
    with_hang_detection,
    with_scope,
)
from trainguard.backends.sim.run import RunResult, SimConfig, simulate


@dataclass(frozen=True)
class MemoryCheckpoints:
    """What checkpointing to host memory (replicated to a peer) costs instead of to disk."""

    checkpoint_cost: float
    restart_cost: float

    @classmethod
    def default_for(cls, config: SimConfig) -> MemoryCheckpoints:
        """A tenth of the disk checkpoint's cost, half the restart (the restore comes from memory)."""
        return cls(config.checkpoint_cost / 10, config.restart_cost / 2)


@dataclass(frozen=True)
class Row:
    policy: str
    result: RunResult


def compare(
    job: TrainingJob | None,
    config: SimConfig,
    memory: MemoryCheckpoints | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    memory = memory or MemoryCheckpoints.default_for(config)
    base = job if job is not None else TrainingJob.model_validate(default_job(config.nodes))
    pod = with_scope(base, "Pod")
    has_hangs = base.spec.hang is not None and base.spec.hang.enabled
    hang_row = (
        ("Pod-scope, no hang detection", with_hang_detection(pod, None))
        if has_hangs
        else (
            f"Pod-scope, hang detection ({DEFAULT_HANG_TIMEOUT} s)",
            with_hang_detection(pod, DEFAULT_HANG_TIMEOUT),
        )
    )
    scale = math.sqrt(memory.checkpoint_cost / config.checkpoint_cost) if config.checkpoint_cost > 0 else 1.0
    in_memory = replace(
        config,
        checkpoint_cost=memory.checkpoint_cost,
        restart_cost=memory.restart_cost,
        interval=config.chosen_interval * scale,
    )
    plans: list[tuple[str, TrainingJob, SimConfig]] = []
    if job is not None:
        plans.append(("as written", job, config))
    plans += [
        ("Pod-scope restart", pod, config),
        ("All-scope restart", with_scope(base, "All"), config),
        ("elastic shrink-and-grow", elastic(pod), config),
        (hang_row[0], hang_row[1], config),
        ("Pod-scope, in-memory checkpoints", pod, in_memory),
    ]
    rows: list[Row] = []
    for label, variant, settings in plans:
        if progress is not None:
            progress(label)
        rows.append(Row(label, simulate(variant, settings)))
    return rows


def compare_isolation(
    job: TrainingJob | None, config: SimConfig, progress: Callable[[str], None] | None = None
) -> list[Row]:
    """The same job on the same faults and bad nodes (``config.bad_nodes``), with the fault tolerance check
    on (bad nodes found and isolated, bounded only by ``faultCheck.maxIsolatedShare``) and off."""
    base = job if job is not None else TrainingJob.model_validate(default_job(config.nodes))
    rows: list[Row] = []
    for label, on in (("fault check on (isolation)", True), ("fault check off", False)):
        if progress is not None:
            progress(label)
        rows.append(
            Row(label, simulate(with_fault_check(base, on, dict(ISOLATION_LIMITS) if on else None), config))
        )
    return rows
