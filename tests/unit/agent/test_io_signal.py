"""The ``io`` progress signal: the tree's read and written bytes, fed on a made-up clock (no sleeping)."""

from __future__ import annotations

import pytest

from trainguard.agent.config import ALL_SIGNALS, parse_signals
from trainguard.agent.detector import Hang, HangDetector, Observation
from trainguard.agent.proc import parse_io
from trainguard.pod.hangsignal import HangSignal

TIMEOUT = 10.0


def run(signals: str, ticks: list[tuple[float, int | None, float | None]]) -> list[Hang | None]:
    """Feed (at, io bytes, cpu seconds) ticks to a fresh detector; the hang each tick reports."""
    detector = HangDetector(timeout=TIMEOUT, signals=parse_signals(signals), started_at=0.0)
    return [
        detector.observe(Observation(now=at, heartbeats={}, io_bytes=io, cpu_seconds=cpu)).hang
        for at, io, cpu in ticks
    ]


def every(until: float, io, cpu=None) -> list[tuple[float, int | None, float | None]]:
    return [(float(t), io(t), None if cpu is None else cpu(t)) for t in range(0, int(until) + 1)]


CASES = [
    # name, signals, ticks, the first tick that reports a hang (None: never), and its idle seconds
    ("unchanged I/O over the timeout is a hang", "io", every(12, lambda t: 500), 10, 10.0),
    ("I/O that changes every second is progress", "io", every(60, lambda t: 500 + t), None, None),
    ("I/O that stops at 5 s: a hang 10 s later", "io", every(20, lambda t: 500 + min(t, 5)), 15, 10.0),
    ("a fall is a change too (a process left)", "io", every(12, lambda t: 900 if t < 8 else 100), None, None),
    ("I/O resumed after a hang clears it", "io", every(30, lambda t: 500 if t < 20 else t), 10, 10.0),
    ("not sampled: the start counts", "io", every(12, lambda t: None), 10, 10.0),
    # ModelArts' order: I/O unchanged, then the devices (here the CPU stands for them) idle: both quiet
    ("quiet I/O but a busy tree is no hang", "io,cpu", every(30, lambda t: 7, lambda t: t), None, None),
    ("quiet I/O and an idle tree is a hang", "io,cpu", every(12, lambda t: 7, lambda t: 0.0), 10, 10.0),
    ("I/O alone keeps an idle tree going", "io,cpu", every(30, lambda t: t, lambda t: 0.0), None, None),
]


@pytest.mark.parametrize(
    ("signals", "ticks", "first", "idle"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_io_signal(signals, ticks, first, idle) -> None:
    hangs = run(signals, ticks)
    found = next((i for i, hang in enumerate(hangs) if hang is not None), None)
    assert found == first
    if first is not None:
        assert hangs[first] is not None
        assert hangs[first].idle_seconds == idle
        assert hangs[first].signal in parse_signals(signals)


def test_resumed_io_clears_the_hang() -> None:
    hangs = run("io", every(30, lambda t: 500 if t < 20 else t))
    assert hangs[19] is not None
    assert hangs[19].signal is HangSignal.IO
    assert all(hang is None for hang in hangs[21:])


def test_io_is_chosen_never_implied() -> None:
    assert (
        HangSignal.IO not in HangDetector.__init__.__defaults__
        if HangDetector.__init__.__defaults__
        else True
    )

    assert HangSignal.IO not in ALL_SIGNALS
    assert HangSignal.IO in parse_signals("io,cpu")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rchar: 100\nwchar: 23\nsyscr: 4\nread_bytes: 0\nwrite_bytes: 4096\n", 123),
        ("rchar: 5\n", 5),
        ("syscr: 4\n", None),
        ("rchar: x\nwchar: 1\n", None),
        ("", None),
    ],
)
def test_parse_io(text: str, expected: int | None) -> None:
    assert parse_io(text) == expected
