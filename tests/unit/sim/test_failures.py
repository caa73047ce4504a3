"""Faults drawn from rates, and traces read from CSV (with errors that name the line)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from trainguard.backends.sim.failures import (
    Failure,
    FailureKind,
    TraceError,
    drawn,
    parse_mix,
    read_trace,
)


def test_drawn_failures_come_at_the_rate_of_all_nodes() -> None:
    failures = list(
        drawn(random.Random(1), nodes=100, mtbf_seconds=1000.0, mix={FailureKind.CRASH: 1}, until=1e4)
    )
    # 100 nodes of MTBF 1000 s fail 1000 times in 10,000 s (Poisson: sd about 32)
    assert 900 < len(failures) < 1100
    assert all(0 <= f.node < 100 and f.kind is FailureKind.CRASH for f in failures)
    assert [f.at for f in failures] == sorted(f.at for f in failures)


def test_the_mix_shares_the_kinds() -> None:
    mix = {FailureKind.NODE: 0.75, FailureKind.HANG: 0.25}
    kinds = [f.kind for f in drawn(random.Random(2), 10, 10.0, mix, until=4000.0)]
    assert kinds.count(FailureKind.NODE) / len(kinds) == pytest.approx(0.75, abs=0.05)
    assert FailureKind.CRASH not in kinds


def test_the_same_seed_draws_the_same_failures() -> None:
    def draw(seed: int) -> list[Failure]:
        return list(drawn(random.Random(seed), 8, 100.0, {FailureKind.CRASH: 1}, until=1000.0))

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_parse_mix_normalizes_and_names_bad_parts() -> None:
    assert parse_mix("node=3,crash=1") == {FailureKind.NODE: 0.75, FailureKind.CRASH: 0.25}
    with pytest.raises(ValueError, match="'disk=1': write KIND=FRACTION with KIND one of node, crash"):
        parse_mix("disk=1")
    with pytest.raises(ValueError, match="'x' is not a number"):
        parse_mix("node=x")
    with pytest.raises(ValueError, match="at least one kind"):
        parse_mix("node=0")


def test_a_trace_is_read_in_time_order(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("time,node,kind\n# a comment\n3600,node-2,NodeNotReady\n60,0,crash\n\n7200,1,eviction\n")
    assert read_trace(trace, nodes=3) == [
        Failure(60.0, 0, FailureKind.CRASH),
        Failure(3600.0, 2, FailureKind.NODE),
        Failure(7200.0, 1, FailureKind.EVICT),
    ]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("60,0\n", "trace.csv:1: expected 3 fields time,node,kind, found 2"),
        ("time,node,kind\nsoon,0,crash\n", "trace.csv:2: time 'soon' is not a number of seconds"),
        ("-5,0,crash\n", "trace.csv:1: time '-5' must be a finite number of seconds >= 0"),
        ("60,node-9,crash\n", "trace.csv:1: node 'node-9' is not one of the 3 GPU nodes (give an index 0-2"),
        ("60,gpu,crash\n", "node 'gpu' is not one of the 3 GPU nodes"),
        ("60,1,meteor\n", "trace.csv:1: kind 'meteor' is not one of node, crash, hang, evict"),
    ],
)
def test_a_bad_trace_names_the_line_and_the_fix(tmp_path: Path, content: str, message: str) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(content)
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_trace(trace, nodes=3)


def test_a_missing_or_binary_trace_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read the trace"):
        read_trace(tmp_path / "nope.csv", nodes=3)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TraceError, match="not a text file"):
        read_trace(binary, nodes=3)
