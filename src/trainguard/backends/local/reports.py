"""Reading what a pod's agent appended to its report file (one JSON object per line).

The report file is how the control plane learns a pod's exit code, hang restarts and progress even when it
is no longer the agent's parent (it was killed and started again in between).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainguard.pod import summary as summaries


@dataclass(frozen=True)
class Report:
    """A pod's report file, folded by the agent's own fold (``trainguard.pod.summary``), which the
    operator's summaries come from too; the fields the runtime reads for itself, taken from it."""

    #: What the controller reads (``AgentReport.from_summary``).
    summary: dict[str, Any] = field(default_factory=summaries.new)
    started: bool = False
    #: When the agent first started the command (wall clock), i.e. when the pod began Running.
    started_at: float | None = None
    #: The training process the agent runs now (for chaos aimed at it, not at the agent).
    child_pid: int | None = None
    #: The agent ended (``exited``, or ``gave-up`` on a hang) and said how.
    exited: bool = False
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None

    @classmethod
    def of(cls, summary: dict[str, Any]) -> Report:
        seen = summaries.read(summary)
        return cls(
            summary,
            started=seen.attempt > 0,
            started_at=seen.started_at,
            child_pid=seen.pid,
            exited=seen.exited,
            exit_code=seen.exit_code,
            signal=seen.signal,
            reason=seen.reason,
        )


class ReportReader:
    """Parses report files again only when they changed (size or modification time)."""

    def __init__(self) -> None:
        self._cache: dict[Path, tuple[tuple[int, int], Report]] = {}

    def read(self, path: Path) -> Report:
        try:
            info = os.stat(path)
        except OSError:
            return Report()
        stamp = (info.st_size, info.st_mtime_ns)
        cached = self._cache.get(path)
        if cached and cached[0] == stamp:
            return cached[1]
        report = parse(path)
        self._cache[path] = (stamp, report)
        return report

    def forget(self, path: Path) -> None:
        self._cache.pop(path, None)


def parse(path: Path) -> Report:
    events: list[dict[str, Any]] = []
    with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            # A line cut short by a crash of the agent is skipped, not fatal.
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict):
                    events.append(item)
    return Report.of(summaries.summarize(events))
