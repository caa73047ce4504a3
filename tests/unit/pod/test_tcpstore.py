"""The TCPStore server's keys (``trainguard.pod.tcpstore.Keys``): what each query does to them, and who is
answered when. Pure logic; tests/unit/test_rendezvous_store.py speaks to the server with torch's own client."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.pod.tcpstore import STOP_WAITING, Keys, Waiter, vector

ANSWERED = bytes([STOP_WAITING])


class Recorder(Waiter):
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        super().__init__(self.sent.append)


@pytest.mark.parametrize(
    ("before", "expected", "new", "returned", "after"),
    [
        (None, b"", b"n", b"n", b"n"),  # missing, expected empty: set
        (
            None,
            b"e",
            b"n",
            b"e",
            None,
        ),  # missing, something expected: left missing, torch answers the expected
        (b"e", b"e", b"n", b"n", b"n"),  # equal: set
        (b"o", b"e", b"n", b"o", b"o"),  # different: kept, and answered
        (b"", b"", b"n", b"n", b"n"),  # present and empty equals an empty expectation
    ],
    ids=["missing-empty", "missing-expected", "equal", "different", "present-empty"],
)
def test_compare_set_answers_as_torchs_server(
    before: bytes | None, expected: bytes, new: bytes, returned: bytes, after: bytes | None
) -> None:
    keys = Keys()
    if before is not None:
        keys.set(b"k", before)
    assert keys.compare_set(b"k", expected, new) == returned
    assert keys.values.get(b"k") == after


def test_add_keeps_decimal_digits_that_get_reads() -> None:
    keys = Keys()
    assert keys.add(b"n", 3) == 3
    assert keys.add(b"n", -5) == -2
    assert keys.values[b"n"] == b"-2"
    keys.set(b"m", b"40")
    assert keys.add(b"m", 2) == 42


def test_append_and_delete() -> None:
    keys = Keys()
    keys.append(b"a", b"x")
    keys.append(b"a", b"y")
    assert keys.values[b"a"] == b"xy"
    assert (keys.delete(b"a"), keys.delete(b"a")) == (1, 0)


def test_a_wait_is_answered_once_every_missing_key_is_there() -> None:
    keys, waiter = Keys(), Recorder()
    keys.set(b"a", b"1")
    assert keys.wait([b"a", b"b", b"c"], waiter) is False
    keys.set(b"b", b"1")
    assert waiter.sent == []
    keys.add(b"c", 1)
    assert waiter.sent == [ANSWERED]
    keys.set(b"c", b"2")  # answered once only
    assert waiter.sent == [ANSWERED]


def test_a_wait_for_keys_already_there_needs_no_later_answer() -> None:
    keys, waiter = Keys(), Recorder()
    keys.set(b"a", b"1")
    assert keys.wait([b"a"], waiter) is True
    assert waiter.sent == []


def test_a_cancelled_wait_is_never_answered() -> None:
    keys, cancelled, other = Keys(), Recorder(), Recorder()
    keys.wait([b"k"], cancelled)
    keys.wait([b"k"], other)
    keys.forget(cancelled)
    keys.set(b"k", b"1")
    assert (cancelled.sent, other.sent) == ([], [ANSWERED])


def test_a_barrier_answers_everyone_when_the_last_arrives() -> None:
    keys = Keys()
    first, second, third = Recorder(), Recorder(), Recorder()
    assert keys.barrier(b"b", 3, first) is False
    assert keys.barrier(b"b", 3, second) is False
    assert (first.sent, second.sent) == ([], [])
    assert keys.barrier(b"b", 3, third) is True  # the caller answers the last itself
    assert (first.sent, second.sent, third.sent) == ([ANSWERED], [ANSWERED], [])


def test_a_queue_push_wakes_one_waiter_and_pop_answers_length_then_value() -> None:
    keys, first, second = Keys(), Recorder(), Recorder()
    assert keys.pop(b"q") == struct.pack("<q", 0)
    keys.wait([b"q"], first)
    keys.wait([b"q"], second)
    keys.push(b"q", b"v1")
    assert (first.sent, second.sent) == ([ANSWERED], [])
    keys.push(b"q", b"v2")
    assert second.sent == [ANSWERED]
    assert keys.ready([b"q"]) is True
    assert keys.pop(b"q") == struct.pack("<q", 2) + vector(b"v1")
    assert keys.pop(b"q") == struct.pack("<q", 1) + vector(b"v2")
    assert keys.ready([b"q"]) is False


_KEY = st.sampled_from([b"a", b"b", b"c"])
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), _KEY, st.binary(max_size=3)),
        st.tuples(st.just("append"), _KEY, st.binary(max_size=3)),
        st.tuples(st.just("delete"), _KEY, st.just(b"")),
        st.tuples(st.just("compare_set"), _KEY, st.binary(max_size=2)),
    ),
    max_size=30,
)


@given(_OPS)
def test_the_values_follow_a_plain_dict(ops: list[tuple[str, bytes, bytes]]) -> None:
    keys, model = Keys(), {}
    for op, key, value in ops:
        if op == "set":
            keys.set(key, value)
            model[key] = value
        elif op == "append":
            keys.append(key, value)
            model[key] = model.get(key, b"") + value
        elif op == "delete":
            assert keys.delete(key) == (1 if model.pop(key, None) is not None else 0)
        else:
            current = model.get(key)
            if (current is None and not value) or current == value:
                model[key] = b"new"
            keys.compare_set(key, value, b"new")
        assert keys.values == model
        assert keys.ready(sorted(model)) is True
