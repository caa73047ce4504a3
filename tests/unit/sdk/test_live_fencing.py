"""A stale incarnation cannot join a live round (``trainguard.sdk._rounds.superseded``): a member whose pod has a
newer incarnation (a higher generation in its id) among the previous members or the arrivals is absent, its
arrival is not taken, and it stops itself when it sees the newer one (``RoundStore``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.pod.contract import Member
from trainguard.sdk._rounds import Arrival, Formed, close, superseded


def m(pod: str, generation: int, pid: int = 10) -> str:
    return Member(pod, generation, pid, 100, "space").id


W0, W1, W2 = m("job-worker-0", 1), m("job-worker-1", 1), m("job-worker-2", 1)
W1_NEW = m("job-worker-1", 2, pid=7)


@pytest.mark.parametrize(
    ("members", "stale"),
    [
        ([W0, W1, W2], set()),
        ([W0, W1, W1_NEW], {W1}),
        ([W1_NEW, W1], {W1}),
        ([m("p", 1, 1), m("p", 1, 2)], set()),  # two processes of one incarnation
        ([m("p", 1), m("p", 3), m("p", 2)], {m("p", 1), m("p", 2)}),
        (["host:1", "host:2", W1], set()),  # not members' ids (another version's): never stale
        ([], set()),
    ],
)
def test_the_members_of_older_incarnations_are_stale(members: list[str], stale: set[str]) -> None:
    assert superseded(members) == stale


@pytest.mark.parametrize(
    ("previous", "arrivals", "expected"),
    [
        # the replacement of worker-1 arrives: its old incarnation is not waited for
        ((W0, W1, W2), [Arrival(W0, 8), Arrival(W2, 8), Arrival(W1_NEW, -1)],
         Formed(1, (W0, W2, W1_NEW), 8, W0, (W1_NEW,))),
        # the old incarnation, cut off but running, arrives too: its arrival is not taken
        ((W0, W1, W2), [Arrival(W1, 8), Arrival(W0, 8), Arrival(W2, 8), Arrival(W1_NEW, -1)],
         Formed(1, (W0, W2, W1_NEW), 8, W0, (W1_NEW,))),
        # the old one arrives in a later round, the new one a member of the previous: not taken either
        ((W0, W1_NEW, W2), [Arrival(W0, 9), Arrival(W1_NEW, 9), Arrival(W2, 9), Arrival(W1, 4)],
         Formed(1, (W0, W1_NEW, W2), 9, W0, ())),
        # no newer incarnation: the old one is waited for as before
        ((W0, W1, W2), [Arrival(W0, 8), Arrival(W2, 8)], None),
    ],
)  # fmt: skip
def test_a_stale_incarnation_is_neither_waited_for_nor_taken(
    previous: tuple[str, ...], arrivals: list[Arrival], expected: Formed | None
) -> None:
    assert close(1, previous, arrivals, set(), 1) == expected


@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(1, 50)), min_size=1, max_size=12),
    st.integers(1, 3),
)
def test_no_round_holds_two_incarnations_of_one_pod(
    members: list[tuple[int, int, int]], minimum: int
) -> None:
    ids = list(dict.fromkeys(m(f"pod-{pod}", gen, pid) for pod, gen, pid in members))
    formed = close(1, (), [Arrival(member, 0) for member in ids], set(), minimum)
    if formed is None:
        return
    generations: dict[str, set[int]] = {}
    for member in formed.members:
        who = Member.parse(member)
        generations.setdefault(who.pod, set()).add(who.generation)
    assert all(len(found) == 1 for found in generations.values())
    newest = {
        Member.parse(i).pod: max(
            Member.parse(j).generation for j in ids if Member.parse(j).pod == Member.parse(i).pod
        )
        for i in ids
    }
    assert all(
        Member.parse(member).generation == newest[Member.parse(member).pod] for member in formed.members
    )
