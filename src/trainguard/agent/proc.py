"""The few facts about processes the agent needs, read from Linux's ``/proc`` with the standard library alone
(the agent runs from a stdlib-only bundle in users' own images, where psutil is not installed).

- ``/proc/<pid>/stat``: the parent (field 4), the state (3), the CPU time in clock ticks (14-17: user and
  system, its own and that of its reaped children) and the start time in clock ticks since boot (22);
- ``/proc/stat``'s ``btime``: the boot time in whole seconds, which turns a start time into the seconds since
  the epoch psutil gives (a process's stable name); ``CLOCK_BOOTTIME`` against the wall clock turns it into the
  moment it started, to a clock tick (``btime`` alone is up to a second early);
- ``/proc/<pid>/io``: ``rchar`` and ``wchar``, the bytes its read and write calls moved (the ``io`` hang
  signal);
- ``/proc/<pid>/cmdline``: the arguments, NUL-separated (empty for a zombie or a kernel thread).

A ``Process`` is a snapshot taken when it was read. Its pid and start time together name one process even
after the pid is reused, so ``send_signal`` never reaches a newcomer that took a dead process's pid (as
psutil does: it checks the start time again just before signalling). Children are found as psutil finds
them: one scan of every ``/proc/<pid>/stat`` for the parent pids, keeping only children that started no
earlier than the process they descend from (an older one is a reused pid).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

_PROC = "/proc"
#: Clock ticks per second (the unit of the times in ``/proc/<pid>/stat``); 100 on every Linux of note.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

_boot_time: float | None = None


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    #: One letter: R running, S sleeping, D disk sleep, T stopped, Z zombie, ...
    state: str
    #: When it started, in clock ticks since boot.
    start_ticks: int
    #: Its CPU time (user and system) and that of its reaped children, in clock ticks.
    cpu_ticks: int

    @property
    def cpu_seconds(self) -> float:
        return self.cpu_ticks / CLOCK_TICKS

    @property
    def create_time(self) -> float:
        """When it started, in seconds since the epoch (as ``psutil.Process.create_time``): a name for the
        process, stable across reads, but up to a second early (``btime`` is whole seconds)."""
        return boot_time() + self.start_ticks / CLOCK_TICKS

    @property
    def started_at(self) -> float:
        """When it started, on the wall clock to a clock tick: for comparing with moments ``time.time()`` gave
        (a failure's), which ``create_time`` cannot do."""
        return wall_clock_at_boot() + self.start_ticks / CLOCK_TICKS


def parse_stat(pid: int, text: str) -> Process | None:
    """``/proc/<pid>/stat`` as a ``Process``; None when it is not such a line."""
    # The command name (field 2) is in parentheses and may hold spaces and parentheses itself.
    end = text.rfind(")")
    fields = text[end + 1 :].split() if end >= 0 else []
    if len(fields) < 20:
        return None
    try:
        ppid = int(fields[1])
        cpu = sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
        start = int(fields[19])
    except ValueError:
        return None
    return Process(pid=pid, ppid=ppid, state=fields[0], start_ticks=start, cpu_ticks=cpu)


def stat(pid: int) -> Process | None:
    """The process ``pid`` as it is now; None when there is none (or it cannot be read)."""
    try:
        with open(f"{_PROC}/{pid}/stat", encoding="utf-8", errors="replace") as file:
            return parse_stat(pid, file.read())
    except OSError:
        return None


def parse_io(text: str) -> int | None:
    """``/proc/<pid>/io`` as the bytes read and written (``rchar`` + ``wchar``); None when it holds neither."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("rchar", "wchar"):
            try:
                found[key.strip()] = int(value.strip())
            except ValueError:
                return None
    return sum(found.values()) if found else None


def io_bytes(pid: int) -> int | None:
    """The bytes ``pid`` read and wrote so far; None when it is gone or not ours to read."""
    try:
        with open(f"{_PROC}/{pid}/io", encoding="utf-8", errors="replace") as file:
            return parse_io(file.read())
    except OSError:
        return None


def snapshot() -> dict[int, Process]:
    """Every process there is (thread-group leaders: ``/proc`` lists no other thread)."""
    try:
        names = os.listdir(_PROC)
    except OSError:
        return {}
    table: dict[int, Process] = {}
    for name in names:
        if name.isdigit():
            process = stat(int(name))
            if process is not None:
                table[process.pid] = process
    return table


def children(pid: int, *, recursive: bool = False) -> list[Process]:
    """The children of ``pid`` (with ``recursive``: every descendant, zombies included); [] when ``pid`` is
    gone. As ``psutil.Process(pid).children(recursive)``."""
    table = snapshot()
    root = table.get(pid) or stat(pid)
    if root is None:
        return []
    by_parent: dict[int, list[Process]] = {}
    for process in table.values():
        by_parent.setdefault(process.ppid, []).append(process)
    found: list[Process] = []
    seen: set[int] = set()
    stack = [pid]
    while stack:
        parent = stack.pop()
        if parent in seen:  # pids reused while /proc was read can make a cycle
            continue
        seen.add(parent)
        for child in by_parent.get(parent, []):
            if child.start_ticks >= root.start_ticks:  # an older "child" has a reused pid
                found.append(child)
                if recursive:
                    stack.append(child.pid)
    return found


def name(pid: int) -> str | None:
    """The process's name (``/proc/PID/comm``: its program's, or the one it gave itself); None when it is
    gone."""
    try:
        with open(f"{_PROC}/{pid}/comm", "rb") as file:
            return file.read().rstrip(b"\n").decode("utf-8", "replace")
    except OSError:
        return None


def cmdline(pid: int) -> list[str] | None:
    """The arguments of ``pid`` ([] for a kernel thread); None when it is gone or a zombie (as psutil, which
    raises ZombieProcess)."""
    try:
        with open(f"{_PROC}/{pid}/cmdline", "rb") as file:
            data = file.read()
    except OSError:
        return None
    if not data:
        process = stat(pid)
        return None if process is None or process.state == "Z" else []
    return data.rstrip(b"\0").decode("utf-8", "replace").split("\0")


def send_signal(process: Process, signum: int) -> bool:
    """Signal ``process`` if it is still the process that was read (not a newcomer with its pid); False when
    it is gone or may not be signalled."""
    current = stat(process.pid)
    if current is None or current.start_ticks != process.start_ticks:
        return False
    try:
        os.kill(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def wall_clock_at_boot() -> float:
    """The wall clock's reading at boot, to the microsecond, as the wall clock stands now (the clock of the
    start times, ``CLOCK_BOOTTIME``, against ``time.time()``); ``boot_time()`` where that clock is missing."""
    if not hasattr(time, "CLOCK_BOOTTIME"):
        return boot_time()
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


def boot_time() -> float:
    """When the machine booted, in seconds since the epoch (``btime`` of ``/proc/stat``)."""
    global _boot_time
    if _boot_time is not None:
        return _boot_time
    with contextlib.suppress(OSError, ValueError), open(f"{_PROC}/stat", encoding="ascii") as file:
        for line in file:
            if line.startswith("btime "):
                _boot_time = float(line.split()[1])
                return _boot_time
    return 0.0
