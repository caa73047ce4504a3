"""Live mode's watchdog (``trainguard.sdk._watchdog``): when a member whose beats stopped is taken for silent."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.pod.contract import LiveKeys
from trainguard.sdk._watchdog import Watchdog

A, B = "a/1/10/100/", "b/1/11/100/"


class Rounds:
    """A ``RoundStore`` whose members' beats say ``beats_silent`` (what ``RoundStore.silent`` would find)."""

    def __init__(self, beats_silent: list[str]) -> None:
        self.beats_silent = beats_silent

    def silent(self, watch: Any, members: tuple[str, ...], staleness: Any, now: float) -> list[str]:
        return list(self.beats_silent)


def watchdog(beats_silent: list[str]) -> Watchdog:
    dog = Watchdog(
        None,
        Rounds(beats_silent),  # type: ignore[arg-type]
        LiveKeys("t/"),
        A,
        poll=0.05,
        stale_after=1.5,
        join_within=10.0,
        abort=lambda why: None,
    )
    dog.watching(3, (A, B))
    return dog


@pytest.mark.parametrize(
    ("heard_ago", "silent"),
    [
        (None, [B]),  # no collective completed in this round: the beats decide
        (0.2, []),  # every member took part in one 0.2 s ago: B is alive, only its beats are late
        (1.4, []),
        (1.5, [B]),  # the last one as long ago as the stale time: the beats decide again
        (30.0, [B]),
    ],
)
def test_a_member_whose_beats_stopped_is_silent_unless_it_took_part_in_a_collective_since(
    heard_ago: float | None, silent: list[str]
) -> None:
    """A member's beats can stop while it trains on: its connection to the store was cut (the store's pod
    re-created) and it has not noticed yet. The round's collectives say it is alive."""
    dog = watchdog([B])
    now = 1000.0
    if heard_ago is not None:
        dog.together_at = now - heard_ago
    assert dog.found_silent(now) == silent


def test_a_new_round_forgets_the_previous_rounds_collectives() -> None:
    dog = watchdog([B])
    dog.heard_from_all()
    assert dog.together_at is not None
    assert dog.found_silent(dog.together_at + 0.1) == []
    dog.watching(4, (A, B))  # B was in the collective of round 3, not of round 4
    assert dog.found_silent(dog.together_at or 1000.0) == [B]


def test_members_that_beat_are_never_silent() -> None:
    assert watchdog([]).found_silent(1000.0) == []


def test_what_was_found_of_a_round_left_meanwhile_does_not_abort_the_next() -> None:
    """The watchdog's thread judges round 3; the training thread begins round 4 meanwhile (its groups are made
    from then on): the verdict on round 3 aborts nothing."""
    aborted: list[str] = []
    dog = watchdog([B])
    dog.abort = aborted.append
    dog.watching(4, (A, B))
    dog._abort(3, "a member left the round")
    assert aborted == []
    dog._abort(4, "a member left the round")
    assert aborted == ["a member left the round"]
