"""``heartbeat(step=..., **metrics)``: tell the trainguard agent that training makes progress.

Call it once per step (or more often); it costs a dictionary lookup when the agent is absent and at most one
small file write per ``MIN_INTERVAL`` seconds when it is there. The agent restarts the command in place when
heartbeats stop for the hang timeout, and reports the step and metrics as the pod's progress.

The contract with the agent: when ``TRAINGUARD_HEARTBEAT_DIR`` is set, each call that is not rate-limited
replaces ``<dir>/rank-<RANK or 0>.json`` atomically (a temporary file, then a rename) with
``{"step": int | null, "time": <wall clock>, "pid": <this process>, "rank": int, "metrics": {...}}``.
Without the variable, ``heartbeat`` does nothing. It never raises: a heartbeat must not stop training.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from trainguard.pod import contract

#: At most one write per this many seconds; a call after a longer gap always writes.
MIN_INTERVAL = 0.2


class Heartbeats:
    """The writer behind ``heartbeat``; one per process is enough."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        env: Mapping[str, str] = os.environ,
        min_interval: float = MIN_INTERVAL,
    ) -> None:
        self._clock = clock
        self._env = env
        self._min_interval = min_interval
        self._lock = threading.Lock()
        self._last_write: float | None = None

    def beat(self, step: int | None = None, **metrics: Any) -> None:
        directory = self._env.get(contract.ENV_HEARTBEAT_DIR)
        if not directory:
            return
        now = self._clock()
        if self._last_write is not None and now - self._last_write < self._min_interval:
            return
        with self._lock:
            if self._last_write is not None and now - self._last_write < self._min_interval:
                return
            self._last_write = now
            with contextlib.suppress(OSError, ValueError, TypeError):
                # A missing directory or a full disk must not stop training.
                self._write(directory, step, metrics)

    def _write(self, directory: str, step: int | None, metrics: Mapping[str, Any]) -> None:
        rank = _rank(self._env)
        record = {
            "step": None if step is None else int(step),
            "time": time.time(),
            "pid": os.getpid(),
            "rank": rank,
            "metrics": {str(name): _plain(value) for name, value in metrics.items()},
        }
        path = os.path.join(directory, contract.heartbeat_file(rank))
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as out:
            json.dump(record, out, separators=(",", ":"))
        os.replace(temporary, path)


_heartbeats = Heartbeats()


def heartbeat(step: int | None = None, **metrics: Any) -> None:
    """Record progress: ``step`` (e.g. the global step) and optional numbers such as ``loss=...``.

    Metric values are written as floats when they convert (Python numbers, NumPy scalars, one-element torch
    tensors), else as strings. A no-op outside the agent; never raises.
    """
    _heartbeats.beat(step, **metrics)


def _rank(env: Mapping[str, str]) -> int:
    try:
        return int(env.get(contract.RANK, "0"))
    except ValueError:
        return 0


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)
