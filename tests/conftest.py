"""For every test: hypothesis checks properties, not speed (speed is measured in benchmarks/), so no example
has a deadline; the unit tests also run beside the real-node tests (scripts/test), where one example's time
says nothing.

Where ``TRAINGUARD_FAILURES_FILE`` is set (scripts/test sets it), each failed test's report is appended there:
the suite prints them last, so that a failure's explanation (a wait's ``explain``) is in the lines that CI
keeps, not in the middle of the other lane's output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("trainguard", deadline=None)
settings.load_profile("trainguard")

#: The lines kept of each failure: its message first (the assertion, a wait's explanation), then the end of
#: its traceback.
FAILURE_LINES = 120
#: The lines of each failure's message in the digest printed after them all, and the characters of each.
DIGEST_LINES = 16
DIGEST_WIDTH = 240


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    where = os.environ.get("TRAINGUARD_FAILURES_FILE")
    if not where or not report.failed:
        return
    text = report.longreprtext.splitlines()
    message = [line for line in text if line.startswith("E ")]
    trace = [line for line in text if not line.startswith("E ")][-max(FAILURE_LINES - len(message), 20) :]
    lines = [*message[-FAILURE_LINES:], "", *trace]
    with Path(where).open("a", encoding="utf-8") as out:
        out.write(f"== {report.nodeid} ({report.when}) failed; its message, then its traceback's end:\n")
        out.write("\n".join(lines) + "\n")
    # ... and the gist of each, printed after all of them: where several failed, CI's cut of a long output
    # may fall in the middle of one report, never in this short list. Its first words (what failed) and its
    # last (where a wait's explanation ends).
    if len(message) > DIGEST_LINES:
        message = [*message[:2], "E   ...", *message[3 - DIGEST_LINES :]]
    with Path(f"{where}.digest").open("a", encoding="utf-8") as out:
        out.write(f"== {report.nodeid}:\n" + "\n".join(line[:DIGEST_WIDTH] for line in message) + "\n")
