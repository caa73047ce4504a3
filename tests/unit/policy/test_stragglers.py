"""Stragglers found (``trainguard.policy.stragglers``): a rank whose work per step is ``factor`` times the
median of the others', measured over ``steps`` steps at least."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.api.faultcheck import StragglerPolicy
from trainguard.policy.stragglers import RankTiming, find_stragglers

POLICY = StragglerPolicy(factor=1.5, steps=10)


def _ranks(*seconds: float, steps: int = 10) -> list[RankTiming]:
    return [RankTiming(f"pod-{rank}", rank, steps, busy) for rank, busy in enumerate(seconds)]


@pytest.mark.parametrize(
    ("seconds", "steps", "found"),
    [
        ((0.1, 0.1, 0.1, 0.1), 10, []),  # all alike
        ((0.1, 0.1, 0.3, 0.1), 10, [(2, 3.0)]),  # rank 2 works three times as long
        ((0.1, 0.1, 0.3, 0.1), 9, []),  # not measured over enough steps yet
        ((0.1, 0.149, 0.1), 10, []),  # just under the factor
        ((0.1, 0.16, 0.1), 10, [(1, 1.6)]),  # past the factor
        ((0.1, 0.4), 10, [(1, 4.0)]),  # two ranks: the slower one
        ((0.3,), 10, []),  # alone: nothing to compare with
        ((0.1, 0.0, 0.1), 10, []),  # a rank that measured nothing is left out
    ],
)
def test_a_rank_much_slower_than_the_others_is_a_straggler(
    seconds: tuple[float, ...], steps: int, found: list[tuple[int, float]]
) -> None:
    stragglers = find_stragglers(_ranks(*seconds, steps=steps), POLICY)
    assert [(s.rank, round(s.ratio, 3)) for s in stragglers] == found
    for straggler in stragglers:
        assert f"rank {straggler.rank} of pod-{straggler.rank}" in straggler.words


@given(st.lists(st.floats(min_value=0.01, max_value=10), min_size=2, max_size=40), st.floats(1.01, 10))
def test_a_straggler_always_works_factor_times_the_median_of_the_others(
    seconds: list[float], factor: float
) -> None:
    policy = StragglerPolicy(factor=factor, steps=1)
    timings = _ranks(*seconds, steps=1)
    found = {s.rank for s in find_stragglers(timings, policy)}
    for timing in timings:
        others = sorted(t.busy_seconds for t in timings if t is not timing)
        middle = len(others) // 2
        median = others[middle] if len(others) % 2 else (others[middle - 1] + others[middle]) / 2
        assert (timing.rank in found) == (timing.busy_seconds >= factor * median)
    # Never every rank at once: the fastest rank is never slower than the others' median.
    assert len(found) < len(timings)


def test_a_rank_a_little_busier_than_idle_peers_is_no_straggler() -> None:
    """Rank 0 logs a millisecond more per 0.1 s step than peers that mostly wait: 3 times their work, but
    1 % of the step, under minShare (10 %): the job loses nothing to it."""
    timings = [RankTiming(f"pod-{r}", r, 10, busy, 0.1) for r, busy in enumerate((0.0015, 0.0005, 0.0005))]
    assert find_stragglers(timings, POLICY) == []
    slow = [RankTiming(f"pod-{r}", r, 10, busy, 0.1) for r, busy in enumerate((0.0005, 0.03, 0.0005))]
    assert [s.rank for s in find_stragglers(slow, POLICY)] == [1]
