"""The one fencing setting and what is derived from it: the agent's bound, its renewals."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.policy.fencing import (
    DEFAULT_SECONDS,
    MIN_MARGIN,
    MIN_SECONDS,
    Fencing,
    fencing_of,
)


@pytest.mark.parametrize(
    ("seconds", "bound"),
    [(DEFAULT_SECONDS, 90.0), (20.0, 10.0), (40.0, 30.0), (60.0, 45.0), (600.0, 450.0)],
)
def test_the_agent_bound_is_the_setting_less_its_margin(seconds: float, bound: float) -> None:
    assert Fencing(seconds).agent_bound == bound


@pytest.mark.parametrize("seconds", [19.9, 5.0, -1.0, math.nan])
def test_a_setting_too_short_is_refused_with_the_fix(seconds: float) -> None:
    with pytest.raises(ValueError, match=r"at least 20 s.*or 0 to turn fencing off"):
        fencing_of(seconds)


def test_zero_turns_fencing_off() -> None:
    assert fencing_of(0) is None


@given(st.floats(min_value=MIN_SECONDS, max_value=1e6))
def test_the_agent_ends_its_workers_a_margin_before_the_operator_replaces_them(seconds: float) -> None:
    fencing = Fencing(seconds)
    assert fencing.agent_bound + MIN_MARGIN <= fencing.seconds
    assert fencing.agent_bound >= MIN_SECONDS - MIN_MARGIN
