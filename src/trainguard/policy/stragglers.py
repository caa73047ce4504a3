"""Stragglers, found: a rank that works ``factor`` times longer per step than the job's other ranks.

In synchronous training every rank takes the same wall time per step (the fast ones wait for the slow one in
each collective), so a rank's own work per step is what tells them apart: the share of the step it spends
working rather than waiting, times the step's time (the agent measures it: ``trainguard.pod.summary``'s
``ranks``). A rank whose work per step is at least ``factor`` times the median of the others', measured over
at least ``steps`` steps, and whose extra work costs at least ``minShare`` of a step's time, is a straggler; the
finding carries its figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from trainguard.api.faultcheck import StragglerPolicy


@dataclass(frozen=True)
class RankTiming:
    """One rank's work per step, as its pod's agent measured it over its latest ``steps`` steps."""

    pod: str
    rank: int
    steps: int
    #: Seconds of the rank's own work per step (not waiting for its peers).
    busy_seconds: float
    #: The step's wall time (0: not measured).
    step_seconds: float = 0.0


@dataclass(frozen=True)
class Straggler:
    pod: str
    rank: int
    steps: int
    seconds: float
    #: The median of the other ranks' work per step.
    others: float
    ratio: float

    @property
    def words(self) -> str:
        return (
            f"rank {self.rank} of {self.pod} works {self.seconds:.3g} s per step, {self.ratio:.1f} times the "
            f"other ranks' {self.others:.3g} s (median), over {self.steps} steps"
        )


def find_stragglers(timings: Sequence[RankTiming], policy: StragglerPolicy) -> list[Straggler]:
    """The stragglers among ``timings`` (two ranks measured over ``policy.steps`` steps at least)."""
    measured = [t for t in timings if t.steps >= policy.steps and t.busy_seconds > 0]
    if len(measured) < 2:
        return []
    found: list[Straggler] = []
    for timing in measured:
        others = median(t.busy_seconds for t in measured if t is not timing)
        # What it costs the job: a rank a little busier than idle peers (rank 0's logging) is no straggler.
        costly = timing.busy_seconds - others >= policy.min_share * timing.step_seconds
        if others > 0 and timing.busy_seconds >= policy.factor * others and costly:
            found.append(
                Straggler(
                    timing.pod,
                    timing.rank,
                    timing.steps,
                    timing.busy_seconds,
                    others,
                    timing.busy_seconds / others,
                )
            )
    return found
