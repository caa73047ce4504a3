"""Live mode's membership decision (``trainguard.sdk._rounds``): who forms the next round, in which order, at
which step, and who sends the state to whom."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.sdk._rounds import (
    MAX_FAILED_FORMATIONS,
    Arrival,
    Failures,
    Formed,
    Lateness,
    Staleness,
    awaited,
    close,
)

A, B, C, D = "a:1", "b:2", "c:3", "d:4"


@pytest.mark.parametrize(
    ("previous", "arrivals", "absent", "minimum", "expected"),
    [
        # the first round waits for the world size
        ((), [Arrival(A, -1), Arrival(B, -1)], set(), 3, None),
        ((), [Arrival(A, -1), Arrival(B, -1), Arrival(C, -1)], set(), 3, Formed(1, (A, B, C), -1, None, ())),
        # a survivor still to come: wait
        ((A, B, C), [Arrival(A, 8), Arrival(C, 8)], set(), 1, None),
        # the killed one is gone: the survivors form at once, in their order, nobody receives
        ((A, B, C), [Arrival(C, 8), Arrival(A, 8)], {B}, 1, Formed(1, (A, C), 8, A, ())),
        # a newcomer joins after the survivors and receives the state from the first holder
        (
            (A, C),
            [Arrival(D, -1), Arrival(C, 49), Arrival(A, 49)],
            set(),
            1,
            Formed(1, (A, C, D), 49, A, (D,)),
        ),
        # a survivor whose optimizer applied the failed step is ahead: it sends, the one behind receives
        ((A, B), [Arrival(A, 10), Arrival(B, 11)], set(), 1, Formed(1, (A, B), 11, B, (A,))),
        # below the minimum: wait
        ((A, B, C), [Arrival(A, 8)], {B, C}, 2, None),
        # an arrival recorded twice counts once
        ((A, B), [Arrival(A, 3), Arrival(B, 3), Arrival(A, 3)], set(), 1, Formed(1, (A, B), 3, A, ())),
    ],
)
def test_a_round_closes_when_nobody_it_waits_for_can_still_come(
    previous: tuple[str, ...],
    arrivals: list[Arrival],
    absent: set[str],
    minimum: int,
    expected: Formed | None,
) -> None:
    assert close(1, previous, arrivals, absent, minimum) == expected


def test_awaited_lists_the_previous_members_neither_arrived_nor_absent() -> None:
    assert awaited((A, B, C), [Arrival(A, 1)], {C}) == [B]


def test_a_formed_round_round_trips_through_the_store() -> None:
    formed = Formed(7, (A, C, D), 49, A, (D,))
    assert Formed.loads(formed.dumps()) == formed
    assert formed.rank_of(D) == 2


members = st.sampled_from([A, B, C, D, "e:5", "f:6"])


@given(
    previous=st.lists(members, unique=True, max_size=5),
    arrivals=st.lists(st.tuples(members, st.integers(-1, 5)), max_size=8),
    absent=st.sets(members),
    minimum=st.integers(0, 4),
)
def test_a_formed_round_keeps_the_survivors_order_and_agrees_on_the_highest_step(
    previous: list[str], arrivals: list[tuple[str, int]], absent: set[str], minimum: int
) -> None:
    came = [Arrival(m, s) for m, s in arrivals]
    formed = close(2, tuple(previous), came, absent, minimum)
    if formed is None:
        return
    first = {}
    for arrival in came:
        first.setdefault(arrival.member, arrival.step)
    # every arrival is in, once; no previous member is left out unless absent
    assert sorted(formed.members) == sorted(first)
    assert not [m for m in previous if m not in first and m not in absent]
    # the survivors first, in their previous order
    survivors = [m for m in formed.members if m in previous]
    assert list(formed.members[: len(survivors)]) == [m for m in previous if m in first]
    assert formed.step == max(first.values())
    if formed.step < 0:
        assert formed.source is None
        assert formed.receivers == ()
    else:
        assert first[formed.source] == formed.step
        assert set(formed.receivers) == {m for m in formed.members if first[m] < formed.step}
        assert formed.source not in formed.receivers


def test_a_member_is_stale_once_its_beat_stood_still_for_the_whole_window() -> None:
    staleness = Staleness(after=1.5)
    assert not staleness.stale(A, 4, now=10.0)  # first look: counted from here
    assert not staleness.stale(A, 4, now=11.0)
    assert staleness.stale(A, 4, now=11.5)
    assert not staleness.stale(A, 5, now=12.0)  # it beat again: a new window
    assert not staleness.stale(B, None, now=12.0)  # never beat: counted from the first look too
    assert staleness.stale(B, None, now=13.6)


def test_beating_members_are_late_only_a_bound_after_a_previous_member_arrived() -> None:
    lateness = Lateness(bound=5.0)
    newcomer = [Arrival(D, -1)]
    # a newcomer alone waits for the survivors that beat, however long they take to reach a step's end
    assert not lateness.late((A, B), newcomer, now=0.0)
    assert not lateness.late((A, B), newcomer, now=60.0)
    # once a survivor is there, the one still missing has the bound, counted from then
    assert not lateness.late((A, B), [*newcomer, Arrival(A, 7)], now=61.0)
    assert not lateness.late((A, B), [*newcomer, Arrival(A, 7)], now=66.0)
    assert lateness.late((A, B), [*newcomer, Arrival(A, 7)], now=66.5)
    # a survivor's own arrival starts its bound at once
    survivor = Lateness(bound=5.0)
    assert not survivor.late((A, B), [Arrival(B, 7)], now=100.0)
    assert survivor.late((A, B), [Arrival(B, 7)], now=105.5)


C2 = "c:5"  # c started again by its launcher: another member


@pytest.mark.parametrize(
    ("events", "gives_up_at"),
    [
        # The same three members fail thrice: a script or network that cannot work.
        ([("formed", (A, B, C)), "failed", ("formed", (A, B, C)), "failed", ("formed", (A, B, C)), "failed"], 6),
        # Failures while forming (before a round closes) count against the members last formed.
        ([("formed", (A, B, C)), "failed", "failed", "failed"], 4),
        # A newcomer that dies before its first step, again and again: each round has other members.
        ([("formed", (A, B, C)), "failed", ("formed", (A, B)), "failed", ("formed", (A, B, C2)), "failed",
          ("formed", (A, B)), "failed", ("formed", (A, B, C)), "failed"], None),
        # A step completed between: the count starts over.
        ([("formed", (A, B)), "failed", ("formed", (A, B)), "failed", "stepped", ("formed", (A, B)), "failed",
          ("formed", (A, B)), "failed"], None),
        # The members change, then stay the same: three of those in a row.
        ([("formed", (A, B, C)), "failed", ("formed", (A, B)), "failed", ("formed", (A, B)), "failed",
          ("formed", (A, B)), "failed"], 8),
    ],
)  # fmt: skip
def test_a_member_gives_up_only_after_rounds_of_the_same_members_fail_in_a_row(
    events: list[object], gives_up_at: int | None
) -> None:
    failures = Failures()
    given_up = None
    for at, event in enumerate(events, 1):
        if event == "failed":
            if failures.failed() and given_up is None:
                given_up = at
        elif event == "stepped":
            failures.stepped()
        else:
            assert isinstance(event, tuple)
            failures.formed(event[1])
    assert given_up == gives_up_at


@given(st.lists(st.sampled_from([(A, B), (A, B, C), (A, C2)]), min_size=1, max_size=12))
def test_rounds_whose_members_always_change_never_give_up(memberships: list[tuple[str, ...]]) -> None:
    failures = Failures()
    previous = None
    for members in memberships:
        if members == previous:
            continue
        failures.formed(members)
        assert not failures.failed() or MAX_FAILED_FORMATIONS <= 1
        previous = members
