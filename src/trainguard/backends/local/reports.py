"""Reading what a pod's agent appended to its report file (one JSON object per line).

The report file is how the control plane learns a pod's exit code, hang restarts and progress even when it
is no longer the agent's parent (it was killed and started again in between).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.controller.backend import WorkerRestart


@dataclass(frozen=True)
class Report:
    started: bool = False
    #: When the agent first started the command (wall clock), i.e. when the pod began Running.
    started_at: float | None = None
    exited: bool = False
    exit_code: int | None = None
    signal: int | None = None
    #: The agent stopped retrying hangs and ended the pod ("gave-up").
    gave_up: bool = False
    reason: str | None = None
    in_place_restarts: int = 0
    #: Hangs the agent detected in this launch.
    hangs: int = 0
    #: A hang was detected and not yet followed by a restart or progress.
    hung: bool = False
    last_progress_at: float | None = None
    last_event_at: float | None = None
    #: The training process the agent runs now (for chaos aimed at it, not at the agent).
    child_pid: int | None = None
    #: Restarts of failed workers by torchrun inside the command, with the failed workers' pids.
    worker_restarts: tuple[tuple[WorkerRestart, frozenset[int]], ...] = ()


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
    return fold(events)


def fold(events: list[dict[str, Any]]) -> Report:
    fields: dict[str, Any] = {}
    restarts = 0
    hangs = 0
    hung = False
    workers: list[tuple[WorkerRestart, frozenset[int]]] = []
    for item in events:
        kind = item.get("event")
        at = _number(item.get("time"))
        if at is not None:
            fields["last_event_at"] = at
        if kind == "started":
            fields["started"] = True
            fields.setdefault("started_at", at)
            fields["child_pid"] = _integer(item.get("pid")) or fields.get("child_pid")
        elif kind == "progress":
            hung = False
            if at is not None:
                fields["last_progress_at"] = at
        elif kind == "hang":
            hung = True
            hangs += 1
        elif kind == "restart-in-place":
            hung = False
            restarts += 1
            fields["child_pid"] = _integer(item.get("pid")) or fields.get("child_pid")
        elif kind == "workers-restarted":
            restart = worker_restart(item)
            if restart is not None:
                workers.append(restart)
        elif kind in ("exited", "gave-up"):
            fields.update(
                exited=True,
                exit_code=_integer(item.get("exit_code")),
                signal=_signal(item.get("signal")),
                reason=item.get("reason") if isinstance(item.get("reason"), str) else None,
            )
            if item.get("oom") is True:
                fields["reason"] = "OOMKilled"
            if kind == "gave-up":
                fields["gave_up"] = True
                fields["reason"] = fields["reason"] or "Hang"
    return Report(
        in_place_restarts=restarts, hangs=hangs, hung=hung, worker_restarts=tuple(workers), **fields
    )


def worker_restart(item: dict[str, Any]) -> tuple[WorkerRestart, frozenset[int]] | None:
    """A ``workers-restarted`` line: the restart, and the pids of the workers that had failed."""
    failures = [failure for failure in item.get("failures") or [] if isinstance(failure, dict)]
    coded = [failure for failure in failures if _integer(failure.get("exit_code")) is not None]
    at = _number(item.get("failed_at")) or _number(item.get("time"))
    if not coded or at is None:
        return None
    restart = WorkerRestart(
        at=at,
        exit_code=int(coded[0]["exit_code"]),
        rank=_integer(coded[0].get("rank")),
        failed=len(failures),
        restarts_left=_integer(item.get("restarts_left")),
        max_restarts=_integer(item.get("max_restarts")),
    )
    pids = frozenset(pid for pid in (_integer(failure.get("pid")) for failure in failures) if pid is not None)
    return restart, pids


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _signal(value: object) -> int | None:
    """The agent names signals ("SIGKILL"); older lines may carry the number."""
    if isinstance(value, str):
        with contextlib.suppress(KeyError):
            return int(signal.Signals[value])
        return None
    return _integer(value)
