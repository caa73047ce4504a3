"""The same global batch through every change of world (``trainguard.GlobalBatch``): each world's plan takes
exactly the target, micro-batches within the limit; a target some allowed world does not divide is refused with
what works; and with ``ElasticSampler`` no sample of an epoch is lost or repeated across any sequence of worlds
changing at steps' boundaries (property-tested)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard import ElasticSampler, GlobalBatch


@pytest.mark.parametrize(
    ("target", "micro_max", "world", "micro", "accumulation"),
    [
        (256, 32, 4, 32, 2),
        (256, 32, 8, 32, 1),
        (256, 32, 2, 32, 4),
        (256, None, 4, 64, 1),
        (
            96,
            10,
            4,
            8,
            3,
        ),  # 24 a rank: 3 micro-batches of 8 (10 does not divide 24, 8 is the largest that does)
        (7, 1, 7, 1, 1),
    ],
)
def test_each_world_takes_exactly_the_target_in_micro_batches_within_the_limit(
    target: int, micro_max: int | None, world: int, micro: int, accumulation: int
) -> None:
    plan = GlobalBatch(target, micro_max=micro_max).plan(world)
    assert (plan.micro, plan.accumulation) == (micro, accumulation)
    assert plan.world_size * plan.per_rank == target


@given(st.integers(1, 4096), st.integers(1, 64), st.integers(1, 128))
def test_a_plan_always_sums_to_the_target_with_the_fewest_micro_batches(
    target: int, world: int, limit: int
) -> None:
    batch = GlobalBatch(target, micro_max=limit)
    if target % world:
        with pytest.raises(ValueError, match="does not divide"):
            batch.plan(world)
        return
    plan = batch.plan(world)
    assert plan.world_size * plan.micro * plan.accumulation == target
    assert plan.micro <= limit or plan.micro == 1
    assert not any(  # no fewer accumulation steps would do
        plan.per_rank % n == 0 and plan.per_rank // n <= limit for n in range(1, plan.accumulation)
    )


def test_a_target_some_allowed_world_does_not_divide_is_refused_with_what_works() -> None:
    with pytest.raises(ValueError, match="do not divide") as refused:
        GlobalBatch(256, worlds=range(2, 7))
    words = str(refused.value)
    assert "the worlds [3, 5, 6] do not divide 256" in words
    assert "[2, 4] do" in words
    assert "e.g. 240 or 300" in words  # multiples of 60 (every world's multiple) near 256
    GlobalBatch(240, worlds=range(2, 7))  # 240 = 4 * 60: every world divides it


@given(
    size=st.integers(1, 400),
    worlds=st.lists(st.sampled_from([1, 2, 3, 4, 6]), min_size=1, max_size=12),
    steps=st.lists(st.integers(0, 5), min_size=1, max_size=12),
    seed=st.integers(0, 3),
)
def test_no_sample_is_lost_or_repeated_through_any_change_of_world(
    size: int, worlds: list[int], steps: list[int], seed: int
) -> None:
    """A job with a global batch of 12 trains an epoch of ``size`` samples, its world changing at steps'
    boundaries (each world trains some steps); every rank of each world iterates its share, takes its plan's
    samples each step, and the job advances the sampler by what all ranks took."""
    batch = GlobalBatch(12, worlds=[1, 2, 3, 4, 6])
    sampler = ElasticSampler(size, shuffle=True, seed=seed, rank=0, world_size=1)
    taken: list[int] = []
    phases = [*zip(worlds, steps, strict=False), (worlds[-1], size)]  # the last world ends the epoch
    for world, count in phases:
        plan = batch.plan(world)
        for _ in range(count):
            if sampler.remaining == 0:
                break
            step = []
            for rank in range(world):
                sampler.set_world(rank, world)
                step += list(sampler)[: plan.per_rank]
            taken += step
            sampler.advance(len(step))
    assert sorted(taken) == list(range(size))  # every sample once: none lost, none repeated
