"""Pods as process groups: start them, recognise them again after a restart, signal them.

A pod's process is the agent (``trainguard agent -- CMD``), started in a new session so that it and the
training command form their own process group. A pid alone is not an identity (pids are reused), so a pod
is recognised by its pid together with the process's creation time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

#: Creation times are floats rounded by the kernel's clock ticks; equal within this.
_CREATE_TIME_TOLERANCE = 0.05


@dataclass(frozen=True)
class Started:
    process: subprocess.Popen[bytes]
    pid: int
    create_time: float


def start(argv: Sequence[str], env: Mapping[str, str], cwd: Path | None, log: Path) -> Started:
    """Start ``argv`` as the leader of a new process group, its output appended to ``log``."""
    log.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(log, "ab") as out:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=str(cwd) if cwd else None,
            start_new_session=True,
        )
    try:
        created = psutil.Process(process.pid).create_time()
    except psutil.NoSuchProcess:  # it ended already: the Popen still has its exit status
        created = 0.0
    return Started(process, process.pid, created)


def find(pid: int | None, create_time: float | None) -> psutil.Process | None:
    """The running process with that pid *and* creation time, or None (ended, reaped, or the pid reused)."""
    if not pid or create_time is None:
        return None
    try:
        process = psutil.Process(pid)
        if abs(process.create_time() - create_time) > _CREATE_TIME_TOLERANCE:
            return None
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def descendants(leader: psutil.Process) -> list[psutil.Process]:
    """The training process tree under a pod's agent (not the agent itself)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        return leader.children(recursive=True)
    return []


def signal_tree(leader: psutil.Process, signum: int, *, include_leader: bool = True) -> None:
    """Send ``signum`` to the pod's whole process group and to any descendant that left it."""
    targets = descendants(leader)
    if include_leader:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader.pid, signum)
        targets.append(leader)
    for process in targets:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            process.send_signal(signum)


def kill_tree(leader: psutil.Process) -> None:
    """SIGCONT first, so that a stopped (``chaos hang``) tree can die, then SIGKILL all of it.

    Then SIGKILL the process groups of the descendants seen (the agent runs its command in a session of its
    own): a process that was forking as the tree was listed, such as ``sh -c`` starting its command, has put
    the new child in its group before it died, and the child would otherwise outlive the pod, adopted by init.
    """
    signal_tree(leader, signal.SIGCONT)
    groups = set()
    for process in descendants(leader):
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(process.pid))
    signal_tree(leader, signal.SIGKILL)
    groups.discard(os.getpgrp())  # never our own
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)


def leaders(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` whose parent is not one of them. A process between fork and exec still shows
    its parent's command line and environment: among the processes that look like a pod's agent, the agent
    is the one whose parent is not such a process."""
    pids = {process.pid for process in processes}
    found = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            if process.ppid() not in pids:
                found.append(process)
    return found


def kill_marked(name: str, value: str) -> list[int]:
    """SIGKILL every running process whose environment has ``name=value``; returns their pids.

    A pod's processes inherit its marker unless a command clears its environment, so this finds what left
    the pod's tree (a child forked as the tree was being killed, a daemon adopted by init)."""
    killed = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.status() == psutil.STATUS_ZOMBIE or process.environ().get(name) != value:
                continue
            process.kill()
            killed.append(process.pid)
    return killed


def signal_number(name_or_number: str) -> int:
    """'9', 'KILL', 'SIGKILL' -> 9; ValueError for anything else."""
    text = name_or_number.strip().upper()
    if text.isdigit():
        number = int(text)
        if number in {s.value for s in signal.Signals}:
            return number
        raise ValueError(f"{name_or_number!r} is not a signal number")
    name = text if text.startswith("SIG") else f"SIG{text}"
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ValueError(f"{name_or_number!r} is not a signal (e.g. SIGTERM, KILL, 9)") from None
