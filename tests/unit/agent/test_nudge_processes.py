"""The agent nudged for real: it SIGKILLs the workers of its command started before the failure, and only
those (not the command, not younger workers, not multiprocessing's fork server or resource tracker)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.unit.agent.waiting import wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process trees as on Linux")

#: Like torchrun's agent: starts workers, reaps the ones that die, and lives on.
PARENT = """
import subprocess, sys, time
from pathlib import Path

here = Path(sys.argv[1])

def worker():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

old = [worker(), worker()]
(here / "old.tmp").write_text(" ".join(str(p.pid) for p in old))
(here / "old.tmp").rename(here / "old")
while not (here / "go").exists():
    time.sleep(0.01)
time.sleep(0.1)  # the young worker starts measurably later than the old ones (clock ticks are 10 ms)
young = worker()
(here / "young.tmp").write_text(str(young.pid))
(here / "young.tmp").rename(here / "young")
while True:
    for process in [*old, young]:
        process.poll()
    time.sleep(0.02)
"""

#: trainguard's warm torchrun starts its workers from a fork server.
FORKSERVER_PARENT = """
import multiprocessing, sys, time
from pathlib import Path

def work():
    time.sleep(600)

if __name__ == "__main__":
    here = Path(sys.argv[1])
    context = multiprocessing.get_context("forkserver")
    workers = [context.Process(target=work) for _ in range(2)]
    for process in workers:
        process.start()
    (here / "old.tmp").write_text(" ".join(str(p.pid) for p in workers))
    (here / "old.tmp").rename(here / "old")
    while True:
        for process in workers:
            process.join(0.02)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _alive(pid: int) -> bool:
    return not _gone(pid)


def _pids(path: Path) -> list[int] | None:
    return [int(pid) for pid in path.read_text().split()] if path.exists() else None


class Run:
    def __init__(self, process: subprocess.Popen[bytes], directory: Path) -> None:
        self.process = process
        self.directory = directory
        self.nudge = directory / "nudge"
        self.report = directory / "report.jsonl"
        self.stderr = directory / "stderr"
        self._bump = 0

    def write_nudge(self, text: str) -> None:
        staging = self.nudge.with_name("nudge.tmp")
        staging.write_text(text)
        self._bump += 1  # a new modification time even on a coarse filesystem clock
        stamp = time.time_ns() + self._bump * 1_000_000
        os.utime(staging, ns=(stamp, stamp))
        staging.replace(self.nudge)

    def nudges(self) -> list[dict[str, Any]]:
        if not self.report.exists():
            return []
        lines = [json.loads(line) for line in self.report.read_text().splitlines() if line.strip()]
        return [line for line in lines if line["event"] == "nudged"]

    def command_pid(self) -> int:
        started = wait_until(lambda: self.report.exists() and "started" in self.report.read_text(), "start")
        assert started
        first = json.loads(self.report.read_text().splitlines()[0])
        return int(first["pid"])


@contextmanager
def _agent(tmp_path: Path, script: str, nudge_at_start: str | None = None) -> Iterator[Run]:
    (tmp_path / "parent.py").write_text(script)
    if nudge_at_start is not None:
        (tmp_path / "nudge").write_text(nudge_at_start)
    argv = [
        sys.executable,
        "-m",
        "trainguard.agent",
        "--nudge-file",
        str(tmp_path / "nudge"),
        "--report",
        str(tmp_path / "report.jsonl"),
        "--grace",
        "1",
        "--",
        sys.executable,
        str(tmp_path / "parent.py"),
        str(tmp_path),
    ]
    with (tmp_path / "stderr").open("wb") as stderr:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr)
    run = Run(process, tmp_path)
    try:
        yield run
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def test_only_the_workers_started_before_the_failure_are_killed(tmp_path: Path) -> None:
    # A failure the agent finds at start is old news, even one that would kill every worker there is.
    with _agent(tmp_path, PARENT, nudge_at_start=f"before-start {time.time() + 3600}") as run:
        command = run.command_pid()
        old = wait_until(lambda: _pids(tmp_path / "old"), "the old workers")
        # The failure, on the wall clock as the controller records it: after the old workers started, 0.1 s
        # before the young one (less than btime's rounding, which made such a worker look older).
        failed_at = time.time()
        (tmp_path / "go").touch()
        (young,) = wait_until(lambda: _pids(tmp_path / "young"), "the young worker")

        run.write_nudge(f"before-start {time.time() + 3600}")  # rewritten: still the same failure
        run.write_nudge(f"worker-2#7 {failed_at}\n")
        (nudged,) = wait_until(run.nudges, "the nudge reported")
        assert nudged["token"] == "worker-2#7"
        assert sorted(nudged["killed"]) == sorted(old)
        wait_until(lambda: all(_gone(pid) for pid in old), "the old workers gone")
        assert _alive(young)
        assert _alive(command)
        assert run.process.poll() is None
        line = run.stderr.read_text()
        assert "[trainguard agent] nudge worker-2#7: another pod of the job failed" in line
        assert "SIGKILLed its worker(s)" in line

        # The same failure again does nothing; a new one after the young worker started kills it.
        run.write_nudge(f"worker-2#7 {time.time() + 3600}")
        run.write_nudge(f"worker-0#8 {time.time() + 1}")
        wait_until(lambda: len(run.nudges()) == 2 and run.nudges(), "the second nudge reported")
        assert [n["token"] for n in run.nudges()] == ["worker-2#7", "worker-0#8"]
        assert run.nudges()[1]["killed"] == [young]
        wait_until(lambda: _gone(young), "the young worker gone")
        assert _alive(command)


def test_the_workers_of_a_fork_server_are_found_and_its_helpers_spared(tmp_path: Path) -> None:
    with _agent(tmp_path, FORKSERVER_PARENT) as run:
        command = run.command_pid()
        workers = wait_until(lambda: _pids(tmp_path / "old"), "the workers")
        helpers = [
            child.pid
            for child in psutil.Process(command).children()
            if "multiprocessing" in " ".join(child.cmdline())
        ]
        assert len(helpers) >= 1  # the fork server (and, on most Pythons, the resource tracker)
        run.write_nudge(f"worker-1#1 {time.time() + 1}")
        (nudged,) = wait_until(run.nudges, "the nudge reported")
        assert sorted(nudged["killed"]) == sorted(workers)
        wait_until(lambda: all(_gone(pid) for pid in workers), "the workers gone")
        assert all(_alive(pid) for pid in helpers)
        assert _alive(command)
