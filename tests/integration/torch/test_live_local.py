"""Example 1 in live mode (``--live``, the annotation ``trainguard.io/live: "true"``) on the local runtime: the
survivors of a killed worker, a scale-out and a scale-in keep their processes and lose no step."""

from __future__ import annotations

import time

import pytest
from torch_harness import RECOVERY_TIMEOUT, wait_done, wait_step, wait_world, workers_of

from trainguard.demo.session import Session, digits_job, recovery

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TARGET_ACCURACY = 0.95


def _pids(session: Session, job: str, pods: list[str]) -> dict[str, list[int]]:
    return {pod: sorted(p.pid for p in workers_of(session, job, pod)) for pod in pods}


def test_survivors_keep_their_processes_through_a_kill_and_both_resizes(session: Session) -> None:
    job = session.submit(
        digits_job("digits-live", session.root, epochs=8, step_delay=0.05, checkpoint_every=10, live=True)
    )
    wait_step(session, job, 15)
    pods = ["digits-live-worker-0", "digits-live-worker-1", "digits-live-worker-2"]
    before = _pids(session, job, pods)

    # 1. A worker killed: the launcher restarts it alone; the two others go on in their processes.
    (victim,) = workers_of(session, job, "digits-live-worker-2")
    victim.kill()
    killed_at = time.time()
    back = session.wait(
        "the re-formation after the kill",
        lambda: recovery(session.run(job).events(), killed_at),
        RECOVERY_TIMEOUT,
    )
    assert back.steps_lost == 0, back
    wait_world(session, job, 3, after=killed_at)  # the replacement joined, from a survivor's state
    survivors = ["digits-live-worker-0", "digits-live-worker-1"]
    assert _pids(session, job, survivors) == {pod: before[pod] for pod in survivors}

    # 2. Scale out to 4: the newcomer joins; nobody restarts.
    grow_at = time.time()
    session.scale(job, "worker", 4)
    wait_world(session, job, 4, after=grow_at)
    grown = recovery(session.run(job).events(), grow_at, world=4)
    assert grown is not None
    assert grown.steps_lost == 0, grown
    assert _pids(session, job, survivors) == {pod: before[pod] for pod in survivors}

    # 3. Scale in to 2: the two removed leave, the two kept go on.
    shrink_at = time.time()
    session.scale(job, "worker", 2)
    wait_world(session, job, 2, after=shrink_at)
    shrunk = recovery(session.run(job).events(), shrink_at, world=2)
    assert shrunk is not None
    assert shrunk.steps_lost == 0, shrunk
    assert _pids(session, job, survivors) == {pod: before[pod] for pod in survivors}

    print(f"\nlive: kill {back}\nscale-out {grown}\nscale-in {shrunk}")
    done = wait_done(session, job)
    assert done.fields["accuracy"] >= TARGET_ACCURACY
    starts = [e for e in session.run(job).events() if e.event == "start" and e.t > killed_at]
    assert {e.fields["source"] for e in starts} == {"live"}, starts  # rank 0 kept its own state each time


def test_a_live_job_whose_script_does_not_use_live_runs_as_without(session: Session) -> None:
    spec = digits_job("digits-unused", session.root, epochs=2, step_delay=0.0, checkpoint_every=10)
    spec["metadata"].setdefault("annotations", {})["trainguard.io/live"] = "true"  # but no --live
    job = session.submit(spec)
    wait_world(session, job, 3, after=0.0)  # under torchrun's agent after all: 3 workers in one round
    done = wait_done(session, job)
    assert done.fields["accuracy"] >= 0.5
