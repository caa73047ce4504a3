"""The agent's process tree: reaping, CPU accounting, signalling, and the Linux knobs that keep it whole.

The agent makes itself a child subreaper, so processes orphaned inside the tree (a daemonized helper, the
workers of a dead torchrun) are re-parented to the agent instead of init: every process of the tree stays a
descendant of the agent, where it can be counted, signalled and reaped. The command's own process gets
``PR_SET_PDEATHSIG`` = SIGKILL, so it dies if the agent is killed outright.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from trainguard.agent import proc

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Adopt the tree's orphans (Linux); False where the platform has no such thing."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child SIGKILLed when the agent dies (Linux), or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the agent died between fork and prctl
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def descendants() -> list[proc.Process]:
    """Every running or unreaped process under the agent."""
    return proc.children(os.getpid(), recursive=True)


def cpu_seconds(processes: Iterable[proc.Process]) -> float:
    """CPU time of the processes, including what their reaped children used."""
    return sum(process.cpu_seconds for process in processes)


def io_bytes(processes: Iterable[proc.Process]) -> int:
    """Bytes the processes read and wrote (those that cannot be read count nothing)."""
    return sum(proc.io_bytes(process.pid) or 0 for process in processes)


def signal_tree(group: int | None, processes: Iterable[proc.Process], signum: int) -> None:
    """Signal the command's process group and every descendant, wherever its group is."""
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)
    for process in processes:
        proc.send_signal(process, signum)


def reap() -> dict[int, int]:
    """Collect every exited child (our command and adopted orphans): pid -> wait status."""
    statuses: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return statuses
        if pid == 0:
            return statuses
        statuses[pid] = status


def exit_code(status: int) -> tuple[int, str | None]:
    """A wait status as the shell reports it (a signal N gives 128+N) and the signal's name."""
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None
    if not os.WIFSIGNALED(status):
        raise ValueError(f"not the status of an ended process: {status}")
    signum = os.WTERMSIG(status)
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"SIG{signum}"
    return 128 + signum, name


def oom_kills() -> int | None:
    """The kernel's OOM-kill counter of our memory cgroup (v2 ``memory.events``, v1 ``memory.oom_control``)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates: list[Path] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":
            candidates += [
                Path("/sys/fs/cgroup", relative, "memory.events"),
                Path("/sys/fs/cgroup/memory.events"),
            ]
        elif "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory")
            candidates += [base / relative / "memory.oom_control", base / "memory.oom_control"]
    for candidate in candidates:
        try:
            for entry in candidate.read_text().splitlines():
                key, _, value = entry.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            continue
    return None
