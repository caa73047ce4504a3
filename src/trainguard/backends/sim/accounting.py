"""Goodput accounting: where every second of wall time went.

While the job trains, it computes for ``interval`` seconds, then writes a checkpoint for ``cost`` seconds,
and again. A training segment ends with a fault (the work since the last complete checkpoint is lost: rework)
or gracefully (the job saves first, so nothing is lost: an eviction within its grace period, a restart to
grow back, the end of the simulation). While it does not train, the time is lost to one cause: detection,
restart, waiting for capacity, a save on the way out, the start, or a job that failed.

The interval changes neither when faults happen nor how recovery goes, only how much work each fault
destroys and how long checkpoints take. So the segments of one simulated run give the goodput of every
interval exactly, on the same fault history: that is how the goodput-against-interval curve is drawn.

With fewer workers than asked for (an elastic role that shrank), a second of training does ``fraction`` of
a second's work; the rest is lost to the shrink.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum


class Cause(str, Enum):
    REWORK = "rework"
    CHECKPOINTING = "checkpointing"
    DETECTION = "detection"
    RESTART = "restart"
    WAITING_FOR_CAPACITY = "waiting_for_capacity"
    SHRUNK = "shrunk"
    STARTUP = "startup"
    JOB_FAILED = "job_failed"


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    #: Share of the asked-for workers that trained.
    fraction: float = 1.0
    #: Ended with a save (nothing lost) rather than a fault.
    graceful: bool = False


@dataclass(frozen=True)
class Split:
    """A segment's wall time, split."""

    useful: float
    checkpointing: float
    rework: float
    shrunk: float


def split(segment: Segment, interval: float, cost: float) -> Split:
    length = max(segment.end - segment.start, 0.0)
    cycle = interval + cost
    complete = math.floor(length / cycle) if cycle > 0 else 0
    rest = length - complete * cycle
    computed = complete * interval + (min(rest, interval) if segment.graceful else 0.0)
    rework = 0.0 if segment.graceful else min(rest, interval)
    checkpointing = complete * cost + max(rest - interval, 0.0)
    return Split(
        useful=computed * segment.fraction,
        checkpointing=checkpointing,
        rework=rework,
        shrunk=computed * (1.0 - segment.fraction),
    )


@dataclass(frozen=True)
class Ledger:
    """Wall time of a run, useful and lost by cause, for one checkpoint interval."""

    wall: float
    useful: float
    lost: Mapping[Cause, float]

    @property
    def goodput(self) -> float:
        return self.useful / self.wall if self.wall > 0 else 0.0


def ledger(
    segments: Iterable[Segment], down: Mapping[Cause, float], wall: float, interval: float, cost: float
) -> Ledger:
    """Useful time and lost time by cause, from the training segments and the time spent down."""
    lost = dict.fromkeys(Cause, 0.0)
    for cause, seconds in down.items():
        lost[cause] += seconds
    useful = 0.0
    for segment in segments:
        part = split(segment, interval, cost)
        useful += part.useful
        lost[Cause.CHECKPOINTING] += part.checkpointing
        lost[Cause.REWORK] += part.rework
        lost[Cause.SHRUNK] += part.shrunk
    return Ledger(wall, useful, lost)


def goodput_curve(
    segments: Iterable[Segment],
    down: Mapping[Cause, float],
    wall: float,
    intervals: Iterable[float],
    cost: float,
) -> list[tuple[float, float]]:
    """(interval, goodput) for each interval, on the same run."""
    kept = list(segments)
    return [(tau, ledger(kept, down, wall, tau, cost).goodput) for tau in intervals]


def log_grid(low: float, high: float, points: int) -> list[float]:
    """``points`` intervals from ``low`` to ``high``, evenly spaced on a log scale."""
    if points < 2:
        return [low]
    ratio = (high / low) ** (1 / (points - 1))
    return [low * ratio**i for i in range(points)]
