"""Fencing's decisions in the agent (``trainguard.agent.lease``): what an answer says, and when the command must
end. Only a definite answer says "gone"; everything else is no answer, and only the bound ends the command."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.agent.lease import (
    CONNECT_TIMEOUT,
    RENEWALS_PER_BOUND,
    Answer,
    Reply,
    answer_of,
    fenced,
    next_renewal,
)


@pytest.mark.parametrize(
    ("status", "answer"),
    [
        (200, Answer.RENEWED),
        (204, Answer.RENEWED),
        (410, Answer.GONE),  # the operator: deleted, replaced, or on a NotReady node
        (401, Answer.GONE),  # the API server refuses the pod's bound token: the pod is deleted
        (403, Answer.GONE),
        (None, Answer.NONE),  # no connection, a timeout
        (503, Answer.NONE),  # an operator that has not read the cluster yet (a restart, a new leader)
        (500, Answer.NONE),
        (502, Answer.NONE),
        (404, Answer.NONE),  # an operator without the endpoint: it says nothing about the pod
        (429, Answer.NONE),
        (400, Answer.NONE),
        (301, Answer.NONE),
    ],
)
def test_what_an_answer_says(status: int | None, answer: Answer) -> None:
    assert answer_of(status) is answer


@pytest.mark.parametrize(
    ("now", "renewed_at", "gone", "ends"),
    [
        (100.0, 99.0, None, False),
        (100.0, 91.0, None, False),  # 9 s of a 10 s bound
        (100.0, 90.0, None, True),  # the bound reached
        (100.0, 10.0, None, True),
        (100.0, None, None, False),  # no renewal yet: the command has not started
        (100.0, 99.9, "410 deleted", True),  # gone ends at once, however fresh the last renewal
        (100.0, None, "401", True),
    ],
)
def test_when_the_command_ends(now: float, renewed_at: float | None, gone: str | None, ends: bool) -> None:
    assert (fenced(now, renewed_at, 10.0, gone) is not None) is ends


@given(
    st.floats(min_value=0, max_value=1e6),
    st.floats(min_value=0, max_value=1e6),
    st.floats(min_value=0.1, max_value=1e4),
)
def test_without_a_gone_answer_only_the_bound_ends_the_command(
    renewed_at: float, later: float, bound: float
) -> None:
    reason = fenced(renewed_at + later, renewed_at, bound, None)
    assert (reason is not None) is (renewed_at + later - renewed_at >= bound)


EVERY = 15.0  # the chart's default: a 90 s bound, renewed every 15 s
RENEWED = Reply(200, "", connected=True)
UNREACHED = Reply(None, "timed out", connected=False)
REFUSED = Reply(None, "Connection refused", connected=False)
UNANSWERED = Reply(None, "timed out", connected=True)
STARTING = Reply(503, "not synced", connected=True)


@pytest.mark.parametrize(
    ("reply", "took", "after"),
    [
        (RENEWED, 0.01, EVERY),  # counted from the sending
        (RENEWED, 4.0, EVERY),
        (UNREACHED, CONNECT_TIMEOUT, CONNECT_TIMEOUT),  # a dead address: again at once, on a new connection
        (REFUSED, 0.001, CONNECT_TIMEOUT),  # refused at once: not asked again in a loop
        (UNANSWERED, 5.0, 5.0 + EVERY / 3),  # connected, no answer: a third of the interval
        (STARTING, 0.01, 0.01 + EVERY / 3),
    ],
)
def test_when_the_next_renewal_goes_out(reply: Reply, took: float, after: float) -> None:
    assert next_renewal(100.0, 100.0 + took, reply, EVERY) == pytest.approx(100.0 + after)


def test_a_refused_renewal_is_not_asked_again_sooner_than_a_third_of_a_short_interval() -> None:
    assert next_renewal(100.0, 100.0, REFUSED, 0.6) == pytest.approx(100.2)


def _renewals_before_fenced(bound: float) -> int:
    """How many renewals go out between the last one that renewed (sent at 0) and the command's end, when each is
    sent to an address that never answers (``CONNECT_TIMEOUT`` for no connection)."""
    every = bound / RENEWALS_PER_BOUND
    at, sent = every, 0
    while fenced(at, 0.0, bound, None) is None:
        sent += 1
        at = next_renewal(at, at + CONNECT_TIMEOUT, UNREACHED, every)
    return sent


@pytest.mark.parametrize(("bound", "renewals"), [(20.0, 17), (90.0, 75)])
def test_a_dead_replica_costs_a_renewal_one_connect_timeout(bound: float, renewals: int) -> None:
    """A bound of 20 s (the test clusters': a 30 s fencing) or 90 s (the chart's default) sends that many renewals
    before it ends the command when none gets a connection. With two replicas, one on a lost node, each goes to the
    dead one with odds of one half: all of them did once in 2**17 node losses or fewer (it was 1 in 8 with one
    renewal sent every 6 s at a 20 s bound, each waiting 5 s for its connection)."""
    assert _renewals_before_fenced(bound) == renewals


@given(st.integers(min_value=0, max_value=40), st.lists(st.booleans(), max_size=20))
def test_any_live_pick_within_the_bound_renews(dead_first: int, after: list[bool]) -> None:
    """Whichever replica the Service picks for each renewal, the agent at a 20 s bound is fenced only when each
    of the 17 renewals that fit in the bound went to the dead one: here the first ``dead_first`` do, then a live
    one is picked, then anything."""
    bound = 20.0
    every = bound / RENEWALS_PER_BOUND
    at = every
    for live in [False] * dead_first + [True] + after:
        if fenced(at, 0.0, bound, None) is not None or live:
            break
        at = next_renewal(at, at + CONNECT_TIMEOUT, UNREACHED, every)
    assert (fenced(at, 0.0, bound, None) is not None) is (dead_first >= 17)
