"""``GlobalBatch``: the same global batch whatever the world, through every fault and resize.

Every resize changes the global batch when each rank keeps its batch (the world changes), so the optimizer's
effective learning rate jumps at each fault. With a target global batch, each round tells the script how many
samples each rank takes a step (``per_rank``), as ``accumulation`` micro-batches of ``micro`` samples, so that
``world * per_rank == target`` exactly::

    batch = trainguard.GlobalBatch(256, micro_max=32, worlds=range(2, 9))

    def train(live):
        plan = batch.plan(live.world_size)            # e.g. 4 ranks: 64 a rank, 2 micro-batches of 32
        sampler.set_world(live.rank, live.world_size)
        loader = DataLoader(dataset, batch_size=plan.micro, sampler=sampler)
        ...  # accumulate plan.accumulation micro-batches, then optimizer.step(), sampler.advance(plan.target)

The granularity is exact: a world that does not divide the target has no plan. The worlds the job may have
(``worlds``: from the role's minimum to its maximum) are checked when it is built, and a target that some of
them do not divide is refused with the targets and the worlds that work. With ``ElasticSampler`` (which deals
what is left of the epoch round-robin: after each step the job has consumed a prefix of the epoch's order) no
sample is lost or repeated within an epoch across any change of world at a step's boundary.

Under DDP, gradients are averaged over the ranks, and each rank's loss is its micro-batches' mean over its
accumulation steps (divide each micro-batch's loss by ``accumulation``): the step's gradient is then the mean
over the whole global batch, whatever the world.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class BatchPlan:
    """One world's share of the global batch: each rank takes ``accumulation`` micro-batches of ``micro``."""

    target: int
    world_size: int
    micro: int
    accumulation: int

    @property
    def per_rank(self) -> int:
        return self.micro * self.accumulation


class GlobalBatch:
    """A target global batch, planned for each world (``plan``); ``micro_max``: the largest micro-batch a
    rank's memory allows."""

    def __init__(self, target: int, *, micro_max: int | None = None, worlds: Iterable[int] = ()) -> None:
        if target < 1:
            raise ValueError(f"GlobalBatch({target}): the global batch is at least 1 sample")
        if micro_max is not None and micro_max < 1:
            raise ValueError(f"GlobalBatch(micro_max={micro_max}): a micro-batch is at least 1 sample")
        self.target = target
        self.micro_max = micro_max
        worlds = sorted(set(worlds))
        refused = [world for world in worlds if world < 1 or target % world]
        if refused:
            works = [world for world in worlds if world >= 1 and target % world == 0]
            lcm = _lcm(worlds)
            near = [lcm * k for k in range(max(target // lcm, 1), max(target // lcm, 1) + 2)]
            raise ValueError(
                f"GlobalBatch({target}): the worlds {refused} do not divide {target}, so their ranks cannot "
                f"take equal shares of it; of the worlds {worlds[0]}-{worlds[-1]}, {works or 'none'} "
                f"{'does' if len(works) == 1 else 'do'}. Give a target every world divides (e.g. "
                f"{' or '.join(str(n) for n in near)}), or fewer worlds"
            )

    def plan(self, world_size: int) -> BatchPlan:
        """The share of each of ``world_size`` ranks: the fewest micro-batches whose size divides its share and
        is at most ``micro_max``. ValueError for a world that does not divide the target."""
        if world_size < 1 or self.target % world_size:
            raise ValueError(
                f"GlobalBatch({self.target}): a world of {world_size} does not divide it; the worlds that do: "
                f"{[w for w in range(1, min(self.target, 1024) + 1) if self.target % w == 0][:16]}"
            )
        per_rank = self.target // world_size
        limit = self.micro_max or per_rank
        accumulation = next(n for n in range(1, per_rank + 1) if per_rank % n == 0 and per_rank // n <= limit)
        return BatchPlan(self.target, world_size, per_rank // accumulation, accumulation)


def _lcm(numbers: Iterable[int]) -> int:
    from math import gcd

    result = 1
    for n in numbers:
        if n >= 1:
            result = result * n // gcd(result, n)
    return result
