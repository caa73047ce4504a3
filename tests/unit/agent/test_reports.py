"""Exit statuses as the shell reports them, and the report/termination-log files."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from trainguard.agent.report import Reporter
from trainguard.agent.tree import exit_code


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (0 << 8, (0, None)),
        (3 << 8, (3, None)),
        (255 << 8, (255, None)),
        (int(signal.SIGKILL), (137, "SIGKILL")),
        (int(signal.SIGTERM), (143, "SIGTERM")),
        (int(signal.SIGSEGV) | 0x80, (139, "SIGSEGV")),  # with a core dump
    ],
)
def test_exit_code_of_a_wait_status(status: int, expected: tuple[int, str | None]) -> None:
    assert exit_code(status) == expected


def test_reports_are_json_lines_and_the_final_one_is_the_termination_message(tmp_path: Path) -> None:
    report, termination = tmp_path / "sub" / "report.jsonl", tmp_path / "termination-log"
    reporter = Reporter(report, termination)
    reporter.event("started", pid=42, attempt=1, command=["python", "train.py"])
    reporter.final("exited", pid=42, attempt=1, exit_code=0, signal=None)
    reporter.close()
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert [line["event"] for line in lines] == ["started", "exited"]
    assert {"event", "time", "pid", "attempt"} <= set(lines[0])
    assert json.loads(termination.read_text()) == lines[-1]


def test_the_termination_message_fits_kubernetes_limit(tmp_path: Path) -> None:
    termination = tmp_path / "termination-log"
    Reporter(None, termination).final("exited", pid=1, attempt=1, exit_code=3, huge="x" * 10000)
    assert len(termination.read_bytes()) <= 4096
    assert json.loads(termination.read_text())["exit_code"] == 3


def test_without_a_report_file_nothing_is_written(tmp_path: Path) -> None:
    reporter = Reporter(None, None)
    assert not reporter.enabled
    reporter.final("exited", pid=1, attempt=1)
    assert list(tmp_path.iterdir()) == []
