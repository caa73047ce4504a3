"""A rank's own work per step (``trainguard.agent.rankwork``), measured on real processes: two "ranks" step in
lockstep, each working (a busy loop) for its own share of the step and asleep for the rest, as a fast rank
waits for a slow one in a collective."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.unit.agent.waiting import wait_until
from trainguard.agent.rankwork import RankWork, thread_state

STEP = 0.2
#: Each rank's work per step: rank 1 is the straggler.
WORK = (0.03, 0.15)
_RANK = """
import sys, time
work, step, start = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
while True:
    now = time.time()
    boundary = start + (int((now - start) / step) + 1) * step
    until = boundary - step + work
    while time.time() < until:
        pass
    time.sleep(max(boundary - time.time(), 0))
"""


def test_a_rank_that_works_longer_per_step_measures_so() -> None:
    start = time.time()
    ranks = [
        subprocess.Popen([sys.executable, "-c", _RANK, str(work), str(STEP), str(start)]) for work in WORK
    ]
    work = RankWork(every=0.01, window=60)
    work.start()
    try:

        def steps() -> bool:
            step = int((time.time() - start) / STEP)
            work.track({rank: (proc.pid, step, time.time()) for rank, proc in enumerate(ranks)})
            measured = work.measured()
            return len(measured) == 2 and all(m.steps >= 12 for m in measured)

        wait_until(steps, "two ranks measured over 12 steps", 30)
        fast, slow = work.measured()
        # Each rank's share of its steps spent working: about its own work; a busy machine delays the sleeper's
        # wake-up (counted as work), never shortens the busy loop.
        assert fast.busy_seconds == pytest.approx(WORK[0], abs=0.04)
        assert slow.busy_seconds == pytest.approx(WORK[1], abs=0.05)
        assert slow.busy_seconds >= 1.5 * fast.busy_seconds  # a straggler by the default factor
    finally:
        work.stop()
        for proc in ranks:
            proc.kill()
            proc.wait()


def test_a_restarted_rank_starts_over_and_a_gone_rank_is_forgotten() -> None:
    states = {10: "R", 11: "S"}
    work = RankWork(state=states.get)
    work.track({0: (10, 1, 100.0), 1: (11, 1, 100.0)})
    for _ in range(4):
        work.sample()
    work.track({0: (10, 3, 101.0), 1: (11, 3, 101.0)})
    assert [(m.rank, m.steps, m.busy_seconds) for m in work.measured()] == [(0, 2, 0.5), (1, 2, 0.0)]
    work.track({0: (12, 3, 102.0)})  # rank 0 restarted (a new process), rank 1 gone
    assert work.measured() == []


def test_the_state_of_this_process_is_read() -> None:
    assert thread_state(os.getpid()) == "R"
    assert thread_state(2**22 + 12345) is None
