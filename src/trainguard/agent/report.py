"""The agent's reports: JSON lines appended to the report file, and the final status in the termination log.

Every line is one JSON object with ``event``, ``time`` (wall clock, seconds since the epoch), ``pid`` (the
attempt's process, which is also its process group and session) and ``attempt`` (1 for the first run):

- ``started``: a (re)start of the command; also ``command``.
- ``progress``: a new heartbeat (at most one line per second): ``step``, ``rank``, ``ranks``, ``metrics``.
- ``hang``: ``signal`` (heartbeat, log, cpu or io: the one that detected it) and ``idle_seconds``.
- ``restart-in-place``: the hung attempt was stopped and is run again: ``consecutive``, ``max_consecutive``,
  ``exit_code`` and ``exit_signal`` of the stopped attempt.
- ``exited``: the command ended by itself (or on a signal the agent forwarded): ``exit_code`` (128+N when
  killed by signal N), ``signal`` (e.g. "SIGKILL", or null), ``oom`` (the kernel OOM-killed a process of the
  agent's cgroup meanwhile), ``hang_restarts``. The agent exits with ``exit_code``.
- ``gave-up``: a hang past ``max_consecutive`` restarts: ``reason`` "Hang", ``exit_code`` (``EXIT_HANG``),
  ``hang_restarts``. The agent exits with ``exit_code``.
- ``workers-restarted``: torchrun restarted failed workers inside the command (``trainguard.pod.workerevents``):
  ``failed_at``, ``failures`` (``rank``, ``local_rank``, ``pid``, ``exit_code``, ``signal``), ``restarts_left``,
  ``max_restarts``. Workers the agent killed for a nudge are left out.
- ``nudged``: the agent SIGKILLed its workers for a nudge: ``token``, ``killed``.
- ``live-reformed``: a worker of a live job (``trainguard.Live``) formed a round in its own process
  (``trainguard.pod.workerevents``: ``reformed``): ``round``, ``rank``, ``world_size``, ``step``, ``origin``,
  ``source``, ``seconds``, ``transfer_seconds``, ``bytes``, ``cause``, ``at``, and the worker's ``worker_pid``.
  Every member of a round writes one, so a pod with several workers reports each round several times.
- ``live-unused``: a worker of a live job ended before it formed any round (its script does not use
  ``trainguard.Live``; the pod runs under torchrun's agent instead): ``local_rank``, ``exit_code``, ``at``,
  ``worker_pid``.

The last line is always ``exited`` or ``gave-up``, unless the agent itself was SIGKILLed. That final line is
also written to the termination log (Kubernetes shows it as the container's ``terminated.message``). With an
``Upstream`` (``--report-url``), the events also go to the operator, as a summary (``trainguard.agent.upstream``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from trainguard.agent.upstream import Upstream

#: Kubernetes reads at most 4096 bytes of a termination message.
_TERMINATION_LIMIT = 4096
_KUBERNETES_TERMINATION_LOG = Path("/dev/termination-log")
#: What is kept of a final record that would not fit.
_ESSENTIAL = ("event", "time", "pid", "attempt", "exit_code", "signal", "oom", "reason", "hang_restarts")


class Reporter:
    def __init__(
        self, report_file: Path | None, termination_log: Path | None, upstream: Upstream | None = None
    ) -> None:
        self._fd: int | None = None
        self._upstream = upstream
        if report_file is not None:
            report_file.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(report_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._termination_log = termination_log

    @property
    def enabled(self) -> bool:
        return self._fd is not None or self._upstream is not None

    def event(self, event: str, *, pid: int | None, attempt: int, **fields: Any) -> dict[str, Any]:
        record: dict[str, Any] = {"event": event, "time": time.time(), "pid": pid, "attempt": attempt}
        record.update(fields)
        if self._fd is not None:
            line = json.dumps(record, default=str, separators=(",", ":")) + "\n"
            with contextlib.suppress(OSError):  # a full disk must not take the training down
                os.write(self._fd, line.encode())
        if self._upstream is not None:
            self._upstream.update(record)
        return record

    def final(self, event: str, *, pid: int | None, attempt: int, **fields: Any) -> None:
        record = self.event(event, pid=pid, attempt=attempt, **fields)
        if self._termination_log is not None:
            message = json.dumps(record, default=str, separators=(",", ":"))
            if len(message.encode()) > _TERMINATION_LIMIT:
                brief = {key: value for key, value in record.items() if key in _ESSENTIAL}
                message = json.dumps(brief, default=str, separators=(",", ":"))
            with contextlib.suppress(OSError):
                self._termination_log.write_text(message)

    def close(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def default_termination_log() -> Path | None:
    """Kubernetes' ``/dev/termination-log`` when it exists and we may write it."""
    path = _KUBERNETES_TERMINATION_LOG
    return path if path.exists() and os.access(path, os.W_OK) else None
