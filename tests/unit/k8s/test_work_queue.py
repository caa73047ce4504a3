"""The operator's work queue (``backends.k8s.queue``): keys taken in the order they came, a key added again while
it waits folded into one, and the keys added ``first`` (new jobs) taken before the others."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.backends.k8s.queue import WorkQueue


def drain(queue: WorkQueue[str]) -> list[str]:
    taken = []
    while (key := queue.get(timeout=0)) is not None:
        taken.append(key)
        queue.done(key)
    return taken


@pytest.mark.parametrize(
    ("adds", "taken"),
    [
        ([("a", False), ("b", False), ("c", False)], ["a", "b", "c"]),
        ([("a", False), ("b", True), ("c", False), ("d", True)], ["b", "d", "a", "c"]),
        ([("a", False), ("a", False), ("b", False)], ["a", "b"]),  # folded
        ([("a", False), ("b", False), ("b", True)], ["b", "a"]),  # waiting, then found new: moved ahead
        ([("a", True), ("a", False)], ["a"]),  # a new job's pod changed before it was taken: once, first
    ],
)
def test_new_jobs_are_taken_first_in_their_order(adds: list[tuple[str, bool]], taken: list[str]) -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key, first in adds:
        queue.add(key, first=first)
    assert len(queue) == len(taken)
    assert drain(queue) == taken


def test_a_key_added_while_processed_is_taken_again_after() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a", first=True)
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    queue.add("b")
    assert queue.get(timeout=0) == "b"  # a is being processed: not handed to a second worker
    queue.done("b")
    queue.done("a")
    assert drain(queue) == ["a"]


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.booleans()), max_size=30))
def test_each_key_is_taken_once_and_every_new_one_before_the_rest(adds: list[tuple[str, bool]]) -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key, first in adds:
        queue.add(key, first=first)
    taken = drain(queue)
    assert sorted(taken) == sorted({key for key, _ in adds})
    new = list(dict.fromkeys(key for key, first in adds if first))  # in the order each was found new
    assert taken[: len(new)] == new
