"""The hang detector, fed with observations on a made-up clock: no sleeping, exact times."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.agent.config import parse_signals
from trainguard.agent.detector import (
    CPU_MIN_SECONDS,
    Hang,
    HangDetector,
    HeartbeatSample,
    Observation,
)
from trainguard.pod.hangsignal import HangSignal

TIMEOUT = 10.0
HEARTBEAT, LOG, CPU = HangSignal.HEARTBEAT, HangSignal.LOG, HangSignal.CPU


@dataclass(frozen=True)
class Tick:
    """What the agent sees at ``at``: the ranks that wrote a heartbeat (rank -> step) and those whose writer
    ended, whether output came, and the tree's CPU time (None: not sampled)."""

    at: float
    steps: dict[int, int | None] = field(default_factory=dict)
    output: bool = False
    cpu: float | None = None
    gone: frozenset[int] = frozenset()


def detector(signals: str = "heartbeat,log,cpu", baseline: int | None = None) -> HangDetector:
    return HangDetector(
        timeout=TIMEOUT, signals=parse_signals(signals), started_at=0.0, baseline_step=baseline
    )


def feed(ticks: Sequence[Tick], signals: str = "heartbeat,log,cpu", baseline: int | None = None):
    """Run the ticks through a fresh detector; returns the assessment of each tick."""
    watcher = detector(signals, baseline)
    samples: dict[int, HeartbeatSample] = {}
    output_at: float | None = None
    assessments = []
    for tick in ticks:
        for rank, step in tick.steps.items():
            samples[rank] = HeartbeatSample(step=step, written_at=tick.at, pid=100 + rank)
        for rank in tick.gone:
            samples.pop(rank, None)
        if tick.output:
            output_at = tick.at
        assessments.append(
            watcher.observe(
                Observation(now=tick.at, heartbeats=dict(samples), output_at=output_at, cpu_seconds=tick.cpu)
            )
        )
    return assessments


def every(start: float, stop: float, step: float = 1.0, **kwargs) -> list[Tick]:
    ticks, at = [], start
    while at <= stop + 1e-9:
        ticks.append(Tick(at=round(at, 6), **{k: (v(at) if callable(v) else v) for k, v in kwargs.items()}))
        at += step
    return ticks


CASES = [
    # (name, signals, ticks, expected hang at the last tick)
    (
        "nothing happens: hang once both log and cpu were quiet for the timeout",
        "heartbeat,log,cpu",
        every(0, 10, cpu=0.0),
        Hang(LOG, 10.0),
    ),
    ("nothing happens, just under the timeout", "heartbeat,log,cpu", every(0, 9.75, 0.25, cpu=0.0), None),
    ("a silent job that computes is not hung", "heartbeat,log,cpu", every(0, 60, cpu=lambda t: t), None),
    (
        "a job that prints but uses no CPU is not hung",
        "heartbeat,log,cpu",
        every(0, 60, output=True, cpu=0.0),
        None,
    ),
    (
        "a silent, idle job that heartbeats is not hung",
        "heartbeat,log,cpu",
        every(0, 60, steps=lambda t: {0: int(t)}, cpu=0.0),
        None,
    ),
    (
        "prints and computes but stopped heartbeating: caught by heartbeats",
        "heartbeat,log,cpu",
        [Tick(1, {0: 1}), *every(2, 11, output=True, cpu=lambda t: t)],
        Hang(HEARTBEAT, 10.0),
    ),
    (
        "the oldest rank decides: one stuck rank is a hang",
        "heartbeat",
        [Tick(t, {0: t, 1: t} if t <= 2 else {0: t}) for t in range(13)],
        Hang(HEARTBEAT, 10.0),
    ),
    (
        "a rank whose writer ended is forgotten",
        "heartbeat",
        [
            *(Tick(t, {0: t, 1: t}) for t in range(3)),
            Tick(3, {0: 3}, gone=frozenset({1})),
            *every(4, 40, steps=lambda t: {0: int(t)}),
        ],
        None,
    ),
    (
        "heartbeats as the only signal: the start counts as the first",
        "heartbeat",
        every(0, 10, output=True, cpu=lambda t: t),
        Hang(HEARTBEAT, 10.0),
    ),
    (
        "heartbeats not among the signals are ignored",
        "log",
        every(0, 10, steps=lambda t: {0: int(t)}),
        Hang(LOG, 10.0),
    ),
    (
        "log alone: a computing job that prints nothing hangs",
        "log",
        every(0, 10, cpu=lambda t: t),
        Hang(LOG, 10.0),
    ),
    (
        "cpu alone: a job that prints but uses no CPU hangs",
        "cpu",
        every(0, 10, output=True, cpu=0.0),
        Hang(CPU, 10.0),
    ),
    (
        "a CPU trickle under 1% of a core is idle",
        "cpu",
        every(0, 10, cpu=lambda t: 0.005 * t),
        Hang(CPU, 10.0),
    ),
    ("2% of a core is busy", "cpu", every(0, 60, cpu=lambda t: 0.02 * t), None),
    (
        "CPU time that drops (a process left) is not progress",
        "cpu",
        every(0, 10, cpu=lambda t: 100.0 - t),
        Hang(CPU, 10.0),
    ),
    (
        "the signal that went quiet last is the one reported",
        "log,cpu",
        every(0, 15, output=lambda t: t <= 3, cpu=lambda t: min(t, 5.0)),
        Hang(CPU, 10.0),
    ),
]


@pytest.mark.parametrize(("name", "signals", "ticks", "expected"), CASES, ids=[case[0] for case in CASES])
def test_hang_detection(name: str, signals: str, ticks: list[Tick], expected: Hang | None) -> None:
    assessments = feed(ticks, signals)
    assert assessments[-1].hang == expected
    # Nothing is reported before the end: a hang is declared once, at the first moment it is true.
    assert all(assessment.hang is None for assessment in assessments[:-1])


def test_rank_files_all_gone_waits_a_timeout_for_new_writers() -> None:
    ticks = [Tick(0, {0: 0}), Tick(1, {0: 1})]
    watcher = detector("heartbeat")
    for tick in ticks:
        watcher.observe(Observation(tick.at, {0: HeartbeatSample(tick.steps[0], tick.at, 1)}))
    assert watcher.observe(Observation(5.0, {})).hang is None
    assert watcher.observe(Observation(14.9, {})).hang is None
    assert watcher.observe(Observation(15.0, {})).hang == Hang(HEARTBEAT, 10.0)


@pytest.mark.parametrize("signals", ["heartbeat", "log,cpu", "heartbeat,log,cpu"])
def test_a_rebase_starts_every_timeout_again_and_forgets_the_old_workers(signals: str) -> None:
    """torchrun formed a new round at 12 (timeout 10): quiet since 3 is no hang before 22."""
    watcher = detector(signals)
    watcher.observe(Observation(3.0, {0: HeartbeatSample(7, 3.0, 1)}, output_at=3.0, cpu_seconds=1.0))
    watcher.rebase(12.0)
    assert watcher.observe(Observation(21.9, {}, cpu_seconds=1.0)).hang is None
    hang = watcher.observe(Observation(22.0, {}, cpu_seconds=1.0)).hang
    assert hang == Hang(HEARTBEAT if "heartbeat" in signals else LOG, 10.0)


def test_no_timeout_never_hangs() -> None:
    watcher = HangDetector(timeout=None, signals=parse_signals("log,cpu"), started_at=0.0)
    assert watcher.observe(Observation(now=1e6, heartbeats={}, cpu_seconds=0.0)).hang is None


@pytest.mark.parametrize("timeout", [0.0, -1.0])
def test_rejects_a_timeout_that_is_not_positive(timeout: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        HangDetector(timeout=timeout, signals=parse_signals("log"), started_at=0.0)


# Progress that resets the count of hang restarts in a row.


def test_replaying_steps_below_the_watermark_is_not_progress() -> None:
    assessments = feed([Tick(t, {0: t}) for t in range(6)], "heartbeat", baseline=5)
    assert not any(assessment.progressed for assessment in assessments)
    assert feed([Tick(t, {0: t}) for t in range(7)], "heartbeat", baseline=5)[-1].progressed


@pytest.mark.parametrize(
    ("tick", "progressed"),
    [
        (Tick(11.0, output=True), False),  # its start's first lines, however late
        (Tick(11.0, cpu=50.0), False),  # its imports' CPU
        (Tick(11.0, {0: 5}), False),  # replaying the step it hung after
        (Tick(11.0, {0: 6}), True),
    ],
)
def test_a_restart_of_a_job_that_reported_steps_progresses_only_past_them(
    tick: Tick, progressed: bool
) -> None:
    assert feed([Tick(0.0, cpu=0.0), tick], "heartbeat,log,cpu", baseline=5)[-1].progressed is progressed


def test_any_step_is_progress_before_the_first_hang() -> None:
    assert feed([Tick(0, {0: 0})], "heartbeat")[-1].progressed


def test_best_step_is_the_highest_step_of_the_attempt() -> None:
    assert feed([Tick(0, {0: 3, 1: 7}), Tick(1, {0: 4, 1: 6})], "heartbeat")[-1].best_step == 7


@pytest.mark.parametrize(
    ("signals", "tick", "progressed"),
    [
        ("log,cpu", Tick(9.0, output=True), False),
        ("log,cpu", Tick(11.0, output=True), True),
        ("heartbeat", Tick(11.0, {0: None}), True),  # heartbeats without steps behave like output
        ("heartbeat", Tick(9.0, {0: None}), False),
        ("log", Tick(11.0, cpu=50.0), False),  # CPU is not a signal here
    ],
)
def test_without_steps_activity_after_one_timeout_is_progress(
    signals: str, tick: Tick, progressed: bool
) -> None:
    assert feed([Tick(0.0, cpu=0.0), tick], signals)[-1].progressed is progressed


def test_quiet_is_not_progress() -> None:
    assert not any(a.progressed for a in feed(every(0, 30, cpu=0.0), "log,cpu"))


# Properties against a plain model of the rule.

_gaps = st.lists(st.floats(min_value=0.05, max_value=4.0), min_size=1, max_size=60)


@given(gaps=_gaps, outputs=st.lists(st.booleans(), min_size=60, max_size=60))
def test_log_signal_matches_the_model(gaps: list[float], outputs: list[bool]) -> None:
    now, last, hung_at = 0.0, 0.0, None
    ticks = []
    for gap, output in zip(gaps, outputs, strict=False):
        now += gap
        ticks.append(Tick(now, output=output))
        if output:
            last = now
        if hung_at is None and now - last >= TIMEOUT:
            hung_at = now
            break
    assessments = feed(ticks, "log")
    expected = [tick.at == hung_at for tick in ticks]
    assert [assessment.hang is not None for assessment in assessments] == expected
    if hung_at is not None:
        hang = assessments[-1].hang
        assert hang is not None
        assert hang.signal is LOG
        assert hang.idle_seconds == pytest.approx(hung_at - last)


@given(
    gaps=_gaps,
    beats=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=60, max_size=60),
)
def test_heartbeats_of_two_ranks_match_the_model(gaps: list[float], beats: list[tuple[bool, bool]]) -> None:
    now, steps, changed = 0.0, {}, {}
    ticks, expected = [], []
    for gap, (beat0, beat1) in zip(gaps, beats, strict=False):
        now += gap
        wrote = {}
        for rank, beat in ((0, beat0), (1, beat1)):
            if beat:
                steps[rank] = wrote[rank] = steps.get(rank, -1) + 1
                changed[rank] = now
        ticks.append(Tick(now, wrote))
        progress_at = min(changed.values()) if changed else 0.0
        expected.append(now - progress_at >= TIMEOUT)
        if expected[-1]:
            break
    assessments = feed(ticks, "heartbeat")
    assert [assessment.hang is not None for assessment in assessments] == expected


@given(gaps=st.lists(st.floats(min_value=0.01, max_value=TIMEOUT * 0.99), min_size=1, max_size=50))
def test_heartbeats_more_often_than_the_timeout_never_hang(gaps: list[float]) -> None:
    """Whatever the output and the CPU do, a job that keeps heartbeating is never restarted."""
    now, ticks = 0.0, [Tick(0.0, {0: 0})]
    for step, gap in enumerate(gaps, start=1):
        now += gap
        ticks.append(Tick(now, {0: step}, cpu=0.0))
    assert all(assessment.hang is None for assessment in feed(ticks))


@given(busy=st.floats(min_value=CPU_MIN_SECONDS, max_value=1.0))
def test_cpu_busy_each_second_never_hangs(busy: float) -> None:
    assert all(a.hang is None for a in feed(every(0, 60, cpu=lambda t: busy * t), "cpu"))
