"""What happens to the workers inside a pod: what ``trainguard.pod.torchrun`` tells the agent that runs it.

torchrun's elastic agent restarts its failed workers by itself (within ``--max-restarts``), inside the pod: no
pod ends, so neither a runtime nor the operator would ever see it. And between two rounds no worker runs at
all while the agents re-form the group, which must not look like a hang. ``trainguard.pod.torchrun`` appends one
JSON line per moment to the file named by ``TRAINGUARD_WORKER_EVENTS`` (``contract.ENV_WORKER_EVENTS``) (the agent sets it, in the agent's own
directory for the command); the agent reads the new lines on every poll.

Lines (each with ``event`` and ``time``, the wall clock):

- ``forming``: torchrun's agent begins a rendezvous (the first, or the next round's): no worker runs until
  ``started``. The agent holds its hang detection meanwhile (torchrun's own rendezvous timeouts apply).
- ``started``: the round's workers were started.
- ``failed``: workers failed and torchrun restarts them: ``failures`` (``rank``, ``local_rank``, ``pid``,
  ``exit_code``, ``signal``), ``restarts_left``, ``max_restarts``, and ``spare`` (true: the live launcher called a
  hot spare in the failed worker's place). ``exit_code`` is the shell's (128+N for
  signal N), ``signal`` the signal's name or null. The agent reports it (``workers-restarted``) and the
  controller records it in the job's history.

- ``reformed``: a live job's worker (``trainguard.Live``) formed a new round in the same process: ``round``,
  ``rank``, ``world_size``, the agreed ``step``, ``origin`` (``live``, ``peer``, ``fresh``, ``memory``,
  ``disk``), ``source``, ``seconds``, ``transfer_seconds``, ``bytes``, ``cause``, ``at`` (``Formation``), and
  ``pid``. The SDK writes it. The agent reports it (``live-reformed``) and the controller records each round once in the job's history.
- ``spares``: a live pod's hot spares changed: ``ready`` (spares warm and waiting to be called) of ``wanted``.
  The live launcher writes it; the agent reports it (``spares``) and the controller keeps it in the pod's status.
- ``live-unused``: a live job's worker ended before it formed any round (its script does not use
  ``trainguard.Live``): ``pid``, ``local_rank``, ``exit_code``. The live launcher (``trainguard.pod.livelaunch``)
  writes it and runs the pod under torchrun's agent instead; the agent reports it (``live-unused``) and the
  job gets a Warning Event.

Standard library only, Python 3.8: it runs in users' images from the agent's bundle.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

#: The process name (``/proc/PID/comm``) of the fork server that ``trainguard.pod.torchrun`` forks from itself: its
#: command line is torchrun's own, so the agent knows it by this name; its children are the workers.
FORK_SERVER_NAME = "tg-forkserver"
FORMING, STARTED, FAILED, REFORMED = "forming", "started", "failed", "reformed"
LIVE_UNUSED = "live-unused"
SPARES = "spares"
_READ = (FORMING, STARTED, FAILED, REFORMED, LIVE_UNUSED, SPARES)


@dataclass(frozen=True)
class Formation:
    """One re-formation as a live worker lived it: what ``trainguard.Live`` keeps in ``formations`` and writes
    as a ``reformed`` line (with ``pid``), and what the agent reports of it (``LIVE_FIELDS``)."""

    round: int
    rank: int
    world_size: int
    #: The step every member agreed on (the survivors' current step).
    step: int
    #: Where this process's state came from: ``live`` (it kept its own), ``peer`` (received from the member
    #: named ``source``), or what ``restore`` said (``memory``, ``disk``), or ``fresh`` (nobody held one).
    origin: str
    source: str | None
    #: Seconds from the failure (or the start) to the state in place, and its parts.
    seconds: float
    transfer_seconds: float
    bytes: int
    #: What ended the previous round, as the exception's type and first line; None for the first.
    cause: str | None
    at: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


#: What the agent reports of a live worker's lines, by event: the ``reformed`` line's record, and of a
#: ``live-unused`` line (``live_unused``) the worker's local rank and exit code.
LIVE_FIELDS = {
    REFORMED: tuple(item.name for item in fields(Formation)),
    LIVE_UNUSED: ("local_rank", "exit_code"),
}


def live_unused(path: str, pid: int, local_rank: int, exit_code: int) -> None:
    """A live job's worker ended before it formed any round (its script does not use ``trainguard.Live``)."""
    append(path, LIVE_UNUSED, pid=pid, local_rank=local_rank, exit_code=exit_code)


def failure(rank: int, local_rank: int, pid: int, exitcode: int) -> dict[str, Any]:
    """One failed worker; ``exitcode`` as multiprocessing gives it (-N: killed by signal N)."""
    name: str | None = None
    code = exitcode
    if exitcode < 0:
        code = 128 - exitcode
        with contextlib.suppress(ValueError):
            name = signal.Signals(-exitcode).name
    return {"rank": rank, "local_rank": local_rank, "pid": pid, "exit_code": code, "signal": name}


def append(path: str, event: str, **fields: Any) -> None:
    """Add one line; a write that fails is dropped (the training must not fail for it)."""
    record = {"event": event, "time": time.time(), **fields}
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


class WorkerEventReader:
    """Reads the lines added since the last read (a line still being written is left for the next)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except OSError:
            return []
        complete = data.rfind(b"\n") + 1
        self._offset += complete
        records: list[dict[str, Any]] = []
        for line in data[:complete].splitlines():
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict) and item.get("event") in _READ:
                    records.append(item)
        return records


def failures_of(record: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(pid, failure) of a record's well-formed failures."""
    found: list[tuple[int, dict[str, Any]]] = []
    for item in record.get("failures") or []:
        if (
            isinstance(item, dict)
            and isinstance(item.get("pid"), int)
            and isinstance(item.get("exit_code"), int)
        ):
            found.append((item["pid"], item))
    return found
