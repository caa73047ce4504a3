"""The ledger: every second of a segment is useful, checkpointing, rework or lost to a shrink."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.backends.sim.accounting import Cause, Segment, ledger, log_grid, split


@pytest.mark.parametrize(
    ("length", "graceful", "useful", "checkpointing", "rework"),
    [
        (0.0, False, 0.0, 0.0, 0.0),
        (70.0, False, 0.0, 0.0, 70.0),  # no checkpoint yet: all of it is lost
        (100.0, False, 0.0, 0.0, 100.0),  # the checkpoint had not started
        (105.0, False, 0.0, 5.0, 100.0),  # half a checkpoint: still lost
        (110.0, False, 100.0, 10.0, 0.0),  # a checkpoint just completed
        (950.0, False, 800.0, 80.0, 70.0),
        (950.0, True, 870.0, 80.0, 0.0),  # a save on the way out keeps the last 70 s
        (1095.0, True, 1000.0, 95.0, 0.0),  # stopped while saving: that save counts as checkpointing
    ],
)
def test_split_of_one_segment(
    length: float, graceful: bool, useful: float, checkpointing: float, rework: float
) -> None:
    part = split(Segment(0.0, length, graceful=graceful), interval=100.0, cost=10.0)
    assert (part.useful, part.checkpointing, part.rework, part.shrunk) == pytest.approx(
        (useful, checkpointing, rework, 0.0)
    )


def test_a_shrunk_job_does_a_share_of_the_work() -> None:
    part = split(Segment(0.0, 220.0, fraction=0.75), interval=100.0, cost=10.0)
    assert (part.useful, part.shrunk) == pytest.approx((150.0, 50.0))


@given(
    lengths=st.lists(st.floats(0, 1e5), max_size=20),
    graceful=st.booleans(),
    fraction=st.floats(0.1, 1.0),
    interval=st.floats(1, 1e4),
    cost=st.floats(0, 1e3),
    down=st.floats(0, 1e5),
)
def test_every_second_is_accounted_for(
    lengths: list[float], graceful: bool, fraction: float, interval: float, cost: float, down: float
) -> None:
    start, segments = 0.0, []
    for length in lengths:
        segments.append(Segment(start, start + length, fraction, graceful))
        start += length
    result = ledger(segments, {Cause.RESTART: down}, start + down, interval, cost)
    assert result.useful + sum(result.lost.values()) == pytest.approx(start + down, rel=1e-9, abs=1e-6)
    assert 0.0 <= result.goodput <= 1.0


def test_log_grid_spans_its_ends_evenly() -> None:
    grid = log_grid(10.0, 1000.0, 3)
    assert grid == pytest.approx([10.0, 100.0, 1000.0])
