"""docs/operator.md's tables of ``benchmarks/k8s_peers.py``'s rounds are what the raw files they name give: each
marked table is made again from its files (``benchmarks/_peer_table.py``; the traced submits':
``benchmarks/_submit_trace.py``) and must be the same, figure for figure; every raw file the page names exists."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from benchmarks._peer_table import BEGIN, END, cell, marked_tables, table_of
from benchmarks._submit_trace import BEGIN as TRACE_BEGIN
from benchmarks._submit_trace import trace_table

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "operator.md"
#: A raw file of the peer benchmark named in the page (a name cut short, ``-20261128-214625.json``, follows a
#: whole one and is checked with it).
_RAW = re.compile(r"benchmarks/results/(k8s_peers-[\w-]+\.json)")


def test_the_page_marks_its_peer_tables() -> None:
    assert len(marked_tables(PAGE.read_text())) >= 3
    assert len(marked_tables(PAGE.read_text(), TRACE_BEGIN)) >= 1


#: Each kind of marked table: its mark, what makes it, and the flag of k8s_peers.py that prints it.
KINDS = [(BEGIN, table_of, "--table"), (TRACE_BEGIN, trace_table, "--trace-table")]


@pytest.mark.parametrize(
    ("files", "shown", "make", "flag"),
    [pytest.param(files, shown, make, flag, id=" ".join(Path(f).name for f in files))
     for begin, make, flag in KINDS for files, shown in marked_tables(PAGE.read_text(), begin)],
)  # fmt: skip
def test_each_marked_table_is_its_raw_files(
    files: list[str], shown: list[str], make: Callable[[list[tuple[str, Any]]], list[str]], flag: str
) -> None:
    kept = [(name, json.loads((ROOT / name).read_text())) for name in files]
    assert shown == make(kept), f"regenerate: python benchmarks/k8s_peers.py {flag} {' '.join(files)}"


def test_every_raw_file_the_page_names_exists() -> None:
    named = set(_RAW.findall(PAGE.read_text()))
    assert named
    assert {name for name in named if not (ROOT / "benchmarks" / "results" / name).exists()} == set()


def test_an_unclosed_mark_is_refused() -> None:
    with pytest.raises(ValueError, match="without"):
        marked_tables(f"text\n{BEGIN}benchmarks/results/x.json -->\n| a |\n")
    assert marked_tables(f"{BEGIN}a.json b.json -->\n| a |\n{END}\n") == [(["a.json", "b.json"], ["| a |"])]


@pytest.mark.parametrize(
    ("median", "spread", "unit", "shown"),
    [
        (3.5, [3.5, 3.8], " s", "3.5 s (3.5-3.8)"),
        (2.3, [2.3, 2.3], " s", "2.3 s"),
        (1321.8, [1303.1, 1324.3], " s", "1,321.8 s (1,303.1-1,324.3)"),
        (898, [898, 900], "", "898 (898-900)"),
        (None, [None, None], " s", "-"),
        (2.0, [1.0, None], " s", "2.0 s (1.0-none)"),
        (61.25, [61.2, 61.3], " MiB", "61.2 MiB (61.2-61.3)"),
    ],
)
def test_a_cell(median: float | None, spread: list[float | None], unit: str, shown: str) -> None:
    assert cell(median, spread, unit) == shown
