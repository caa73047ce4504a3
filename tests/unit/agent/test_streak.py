"""Hang restarts in a row: at most max_consecutive, progress starts the count again."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.agent.detector import HangStreak


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_allows_exactly_max_consecutive_restarts(limit: int) -> None:
    streak = HangStreak(limit)
    allowed = [streak.hang(best_step=None) for _ in range(limit + 2)]
    assert allowed == [True] * limit + [False, False]


def test_progress_starts_the_count_again() -> None:
    streak = HangStreak(2)
    assert streak.hang(best_step=5)
    assert streak.hang(best_step=5)
    streak.progressed()
    assert streak.count == 0
    assert streak.hang(best_step=9)


def test_watermark_is_the_highest_step_reached_before_a_hang() -> None:
    streak = HangStreak(3)
    streak.hang(best_step=7)
    streak.hang(best_step=4)
    streak.hang(best_step=None)
    assert streak.watermark == 7


def test_rejects_a_negative_limit() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        HangStreak(-1)


@given(limit=st.integers(0, 5), events=st.lists(st.booleans(), max_size=40))
def test_never_more_than_max_consecutive_restarts_without_progress(limit: int, events: list[bool]) -> None:
    """events: True = a hang, False = progress."""
    streak, in_a_row = HangStreak(limit), 0
    for is_hang in events:
        if not is_hang:
            streak.progressed()
            in_a_row = 0
            continue
        allowed = streak.hang(best_step=None)
        assert allowed == (in_a_row < limit)
        in_a_row += allowed
        assert streak.count <= limit
