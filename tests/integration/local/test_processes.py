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
from trainguard.backends.local.runtime import POD_ID_ENV, find_by_marker

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


def test_an_agent_found_by_its_marker_is_the_agent_and_not_its_child_before_exec(
    started: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = "uid-2/job-launcher-0/8"
    # A parent and a forked child that never execs: the same command line ("trainguard.agent" in it) and the
    # same environment, as an agent and its command have between fork and exec.
    forks = "import os, time\nif os.fork() == 0:\n    time.sleep(300)\nelse:\n    time.sleep(300)\n"
    env = {**os.environ, POD_ID_ENV: marker}
    agent = subprocess.Popen(
        [sys.executable, "-c", forks, "trainguard.agent"], env=env, start_new_session=True
    )
    started.append(agent)
    deadline = time.monotonic() + 10
    while not psutil.Process(agent.pid).children():
        assert time.monotonic() < deadline, "the agent never forked"
        time.sleep(0.02)
    listed = psutil.process_iter
    try:
        for order in (lambda found: found, lambda found: reversed(list(found))):  # either order of listing
            monkeypatch.setattr(psutil, "process_iter", lambda *a, o=order, **k: o(listed(*a, **k)))
            found = find_by_marker(marker)
            assert found is not None
            assert found.pid == agent.pid
        assert find_by_marker("uid-2/job-launcher-0/9") is None
    finally:
        os.killpg(agent.pid, 9)
