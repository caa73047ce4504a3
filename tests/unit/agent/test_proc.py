"""The agent's /proc reader against psutil (which the agent no longer needs), on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.unit.agent.waiting import wait_until
from trainguard.agent import proc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")

#: A parent with two children, one of which has a child of its own; all sleep. Pids go to argv[1].
TREE = """
import subprocess, sys, time
sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
nested = [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(600)", *sleeper]
children = [subprocess.Popen(sleeper), subprocess.Popen(nested)]
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(" ".join(str(p.pid) for p in children))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[int, list[int]]]:
    """(parent, [its children]) once the grandchild exists too."""
    pids = tmp_path / "pids"
    parent = subprocess.Popen([sys.executable, "-c", TREE, str(pids)], start_new_session=True)
    try:
        children = wait_until(
            lambda: pids.exists() and [int(p) for p in pids.read_text().split()], "the children"
        )
        wait_until(lambda: len(psutil.Process(parent.pid).children(recursive=True)) == 3, "the grandchild")
        yield parent.pid, children
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(10)


@pytest.mark.parametrize("recursive", [False, True])
def test_children_as_psutil_finds_them(tree: tuple[int, list[int]], recursive: bool) -> None:
    parent, children = tree
    expected = sorted(p.pid for p in psutil.Process(parent).children(recursive=recursive))
    found = sorted(p.pid for p in proc.children(parent, recursive=recursive))
    assert found == expected
    assert len(found) == (3 if recursive else 2)
    if not recursive:
        assert found == sorted(children)
    assert all(p.ppid in {parent, *children} for p in proc.children(parent, recursive=recursive))


def test_a_process_that_is_gone_has_no_children_stat_or_cmdline() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(10)
    assert proc.children(process.pid, recursive=True) == []
    assert proc.stat(process.pid) is None
    assert proc.cmdline(process.pid) is None


def test_start_time_cpu_time_and_cmdline_as_psutil_reads_them(tree: tuple[int, list[int]]) -> None:
    parent, _ = tree
    for pid in [parent, os.getpid()]:
        theirs = psutil.Process(pid)
        ours = proc.stat(pid)
        assert ours is not None
        assert ours.pid == pid
        assert ours.ppid == theirs.ppid()
        assert ours.create_time == pytest.approx(theirs.create_time(), abs=1e-6)
        assert proc.cmdline(pid) == theirs.cmdline()


def test_cpu_time_counts_reaped_children_as_psutil_does(tmp_path: Path) -> None:
    # Burn CPU in a child, reap it, burn some more, then stop: the numbers hold still while both read them.
    script = (
        "import os, signal, subprocess, sys, time\n"
        "subprocess.run([sys.executable, '-c', 'sum(range(3_000_000))'])\n"
        "sum(range(3_000_000))\n"
        "os.kill(os.getpid(), signal.SIGSTOP)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_until(lambda: psutil.Process(process.pid).status() == psutil.STATUS_STOPPED, "the stop")
        times = psutil.Process(process.pid).cpu_times()
        ours = proc.stat(process.pid)
        assert ours is not None
        assert ours.state == "T"
        expected = times.user + times.system + times.children_user + times.children_system
        assert ours.cpu_seconds == pytest.approx(expected, abs=1e-9)
        assert times.children_user + times.children_system > 0
    finally:
        process.kill()
        process.wait(10)


def test_a_zombie_is_a_child_without_a_cmdline() -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        zombie = wait_until(
            lambda: (s := proc.stat(process.pid)) is not None and s.state == "Z" and s, "a zombie"
        )
        assert zombie.ppid == os.getpid()
        assert proc.cmdline(process.pid) is None
        with pytest.raises(psutil.ZombieProcess):
            psutil.Process(process.pid).cmdline()
        assert process.pid in [p.pid for p in proc.children(os.getpid())]
    finally:
        process.wait(10)


def test_a_signal_reaches_only_the_process_that_was_read() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        read = proc.stat(process.pid)
        assert read is not None
        # The same pid with another start time: a newcomer that took a dead process's pid. Left alone.
        other = proc.Process(read.pid, read.ppid, read.state, read.start_ticks + 1, read.cpu_ticks)
        assert not proc.send_signal(other, signal.SIGKILL)
        assert process.poll() is None
        assert proc.send_signal(read, signal.SIGKILL)
        assert process.wait(10) == -signal.SIGKILL
        assert not proc.send_signal(read, signal.SIGKILL)  # gone
    finally:
        process.kill()
        process.wait(10)


_STAT_TAIL = "S 41 42 42 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 12345 1000 100 18446744073709551615"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"42 (python3) {_STAT_TAIL}", proc.Process(42, 41, "S", 12345, 13)),
        # A command name with spaces and parentheses: the fields start after the last ')'.
        (f"42 (a) b (c)) {_STAT_TAIL}", proc.Process(42, 41, "S", 12345, 13)),
        (f"42 (x) Z 1 {_STAT_TAIL[4:]}", proc.Process(42, 1, "Z", 12345, 13)),
        ("42 (python3) S 41 42", None),
        ("", None),
        (f"42 python3 {_STAT_TAIL}", None),
        (f"42 (python3) {_STAT_TAIL.replace('12345', 'soon')}", None),
    ],
)
def test_parse_stat(text: str, expected: proc.Process | None) -> None:
    assert proc.parse_stat(42, text) == expected


def test_boot_time_is_psutils() -> None:
    assert proc.boot_time() == pytest.approx(psutil.boot_time(), abs=1.0)


def test_started_at_is_the_wall_clock_moment_of_the_start() -> None:
    """A failure's moment (``time.time()``) is compared with workers' starts: a start read from ``btime``
    (whole seconds) is up to a second early, and a worker started just after a failure looked older than it."""
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    after = time.time()
    try:
        process = proc.stat(child.pid)
        assert process is not None
        tick = 1 / proc.CLOCK_TICKS
        assert before - tick <= process.started_at <= after + tick
    finally:
        child.kill()
        child.wait(10)
