"""Killing a pod's processes: what its tree no longer holds is found by the pod's marker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from trainguard.backends.local import processes

pytestmark = pytest.mark.integration

MARKER = "TRAINGUARD_TEST_MARKER"


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    children: list[subprocess.Popen[bytes]] = []
    yield children
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)


def _sleeper(marker: str, children: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    env = {**os.environ, MARKER: marker}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], env=env)
    children.append(child)
    # The environment is readable once the interpreter runs (not between fork and exec).
    deadline = time.monotonic() + 10
    while psutil.Process(child.pid).environ().get(MARKER) != marker:
        assert time.monotonic() < deadline, "the sleeper never started"
        time.sleep(0.02)
    return child


def test_kill_marked_kills_the_processes_with_the_marker_and_spares_the_others(
    started: list[subprocess.Popen[bytes]],
) -> None:
    ours = [_sleeper("uid-1/job-worker-0/2", started) for _ in range(2)]
    other_launch = _sleeper("uid-1/job-worker-0/3", started)

    killed = processes.kill_marked(MARKER, "uid-1/job-worker-0/2")

    assert sorted(killed) == sorted(p.pid for p in ours)
    assert [p.wait(timeout=10) for p in ours] == [-9, -9]
    assert other_launch.poll() is None
    assert processes.kill_marked(MARKER, "uid-1/job-worker-0/2") == []
