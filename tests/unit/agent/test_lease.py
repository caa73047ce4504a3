"""Fencing's decisions in the agent (``trainguard.agent.lease``): what an answer says, and when the command must
end. Only a definite answer says "gone"; everything else is no answer, and only the bound ends the command."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.agent.lease import Answer, answer_of, fenced


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
