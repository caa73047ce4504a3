"""Nudges from the runtime (``--nudge-file FILE``): a pod of the job failed, restart the workers of this one.

A machine that vanishes resets none of its connections, so the workers of the other pods wait in their
collective until it times out (gloo: 30 minutes, NCCL: 10). The runtime knows the pod is gone long before
that; on Kubernetes it cannot signal processes in other pods, so it writes the news into a file of each
surviving pod (a downwardAPI volume projecting the pod's ``trainguard.io/nudge`` annotation) and the agent
does the rest: it SIGKILLs the workers of its command that were started before the failure, and the command
(torchrun's elastic agent) restarts them into a new round, as for any other worker failure. Workers that
already restarted on their own are younger than the failure and are left alone. (SIGKILL, because a worker
blocked inside a collective runs no Python signal handler.)

The file holds one line, ``<token> <failure time>``: the token names the failure (no spaces; a new token is
a new failure) and the time is in seconds since the epoch (a float). A missing, empty or garbled file is no
nudge. The token present when the agent starts is an old failure and is never acted on, nor is a token seen
before.
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from trainguard.agent import proc
from trainguard.pod import workerevents

#: The processes ``multiprocessing`` adds beside the workers (trainguard's warm torchrun starts its workers
#: from a fork server): never workers themselves. trainguard's torchrun forks its fork server from itself,
#: with its own command line: that one is known by its name (``workerevents.FORK_SERVER_NAME``).
_FORKSERVER = "multiprocessing.forkserver"
_HELPERS = (_FORKSERVER, "multiprocessing.resource_tracker")


def is_fork_server(pid: int, cmdline: str) -> bool:
    """Whether the process is a fork server whose children are the workers: multiprocessing's own, or the
    one trainguard's torchrun forks from itself."""
    return _FORKSERVER in cmdline or proc.name(pid) == workerevents.FORK_SERVER_NAME


def is_helper(cmdline: str) -> bool:
    """Whether the process is one of multiprocessing's helpers (a fork server, the resource tracker)."""
    return any(helper in cmdline for helper in _HELPERS)


#: A token is a name, not a document.
_MAX_TEXT = 4096


@dataclass(frozen=True)
class Nudge:
    token: str
    failed_at: float


def format_nudge(token: str, failed_at: float) -> str:
    """The file's line for a failure (what ``parse_nudge`` reads)."""
    return f"{token} {failed_at:.3f}\n"


def parse_nudge(text: str) -> Nudge | None:
    """``<token> <unix time>`` on the first line; None for anything else."""
    lines = text[:_MAX_TEXT].strip().splitlines()
    parts = lines[0].split() if lines else []
    if len(parts) != 2:
        return None
    try:
        failed_at = float(parts[1])
    except ValueError:
        return None
    if not math.isfinite(failed_at) or failed_at <= 0:
        return None
    return Nudge(parts[0], failed_at)


class _Tokened(Protocol):
    @property
    def token(self) -> str: ...


T = TypeVar("T", bound=_Tokened)


class TokenWatch(Generic[T]):
    """A file of one ``<token> ...`` line that the runtime replaces (a nudge, a release), as the agent polls it:
    a stat each time, a read only when the file changed; a token is acted on once, and the one there when the
    agent starts (news of an earlier agent's time) never."""

    def __init__(self, path: Path, parse: Callable[[str], T | None]) -> None:
        self.path = path
        self._parse = parse
        self._stamp: tuple[int, int, int] | None = None
        first = self._read()
        self._seen = first.token if first is not None else None

    def poll(self) -> T | None:
        """What the file says, if its token was not seen before, once; None otherwise."""
        found = self._read()
        if found is None or found.token == self._seen:
            return None
        self._seen = found.token
        return found

    def _read(self) -> T | None:
        try:
            info = os.stat(self.path)  # follows the symlinks of a downwardAPI volume to the current file
        except OSError:
            self._stamp = None
            return None
        stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
        if stamp == self._stamp:
            return None
        self._stamp = stamp
        try:
            with open(self.path, encoding="utf-8", errors="replace") as file:
                return self._parse(file.read(_MAX_TEXT))
        except OSError:
            self._stamp = None
            return None


class NudgeWatch(TokenWatch[Nudge]):
    """The nudge file as the agent polls it."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, parse_nudge)


def workers(command: int) -> list[proc.Process]:
    """The worker processes under the command (torchrun's agent): its children, or the fork server's
    children (warm start), without multiprocessing's helper processes."""
    found = []
    for child in proc.children(command):
        argv = proc.cmdline(child.pid)
        if argv is None:  # gone meanwhile, or a zombie: not a worker to kill
            continue
        cmdline = " ".join(argv)
        if is_fork_server(child.pid, cmdline):
            found.extend(proc.children(child.pid))
        elif not is_helper(cmdline):
            found.append(child)
    return found


def kill_workers_older_than(command: int, failed_at: float) -> list[int]:
    """SIGKILL the command's workers that were started before ``failed_at``; their pids, ascending."""
    killed = []
    for worker in workers(command):
        if worker.started_at < failed_at and proc.send_signal(worker, signal.SIGKILL):
            killed.append(worker.pid)
    return sorted(killed)
