"""An isolated node's cool-down (``trainguard.policy.cooldown``): off by default; a node is due once its
cool-down, doubled for each strike past the first, is over; never longer than a week."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.policy.cooldown import LONGEST, IsolatedNode, cooldown_of, due, next_due


@pytest.mark.parametrize(
    ("strikes", "seconds"), [(1, 600.0), (2, 1200.0), (3, 2400.0), (0, 600.0), (40, LONGEST)]
)
def test_each_strike_past_the_first_doubles_the_cool_down(strikes: int, seconds: float) -> None:
    assert cooldown_of(strikes, 600.0) == seconds


def test_the_nodes_due_are_those_whose_cool_down_is_over_and_none_when_it_is_off() -> None:
    nodes = [
        IsolatedNode("a", since=0.0),
        IsolatedNode("b", since=0.0, strikes=2),
        IsolatedNode("c", since=500.0),
    ]
    assert due(nodes, 600.0, now=599.0) == []
    assert due(nodes, 600.0, now=600.0) == ["a"]
    assert due(nodes, 600.0, now=1100.0) == ["a", "c"]
    assert due(nodes, 600.0, now=1200.0) == ["a", "b", "c"]
    assert next_due(nodes, 600.0) == 600.0
    assert due(nodes, 0.0, now=1e9) == []  # off: only an administrator releases
    assert next_due(nodes, 0.0) is None
    assert next_due([], 600.0) is None


@given(
    st.lists(st.tuples(st.floats(0, 1e6), st.integers(1, 12)), max_size=20),
    st.floats(1, 1e5),
    st.floats(0, 3e6),
)
def test_a_node_is_due_exactly_when_its_cool_down_has_passed(
    records: list[tuple[float, int]], base: float, now: float
) -> None:
    nodes = [IsolatedNode(f"n{i}", since, strikes) for i, (since, strikes) in enumerate(records)]
    found = set(due(nodes, base, now))
    for node in nodes:
        assert (node.name in found) == (node.since + cooldown_of(node.strikes, base) <= now)
    upcoming = next_due(nodes, base)
    assert (upcoming is None) == (not nodes)
    if upcoming is not None:
        assert bool(found) == (upcoming <= now)
