"""Example 1 in live mode (``--live``, the annotation ``trainguard.io/live: "true"``) on the local runtime: the
survivors of the store's loss, a killed worker, a scale-out and a scale-in keep their processes and lose no
step."""

from __future__ import annotations

import json
import time

import psutil
import pytest
from torch_harness import RECOVERY_TIMEOUT, wait_done, wait_step, wait_world, workers_of

from trainguard.demo.session import Session, digits_job, recovery

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TARGET_ACCURACY = 0.95


def _resize(session: Session, job: str, world: int) -> float:
    """Scale to ``world`` workers: training goes on at that size with no step lost. Returns when it was asked."""
    asked = time.time()
    session.scale(job, "worker", world)
    wait_world(session, job, world, after=asked)
    resized = recovery(session.run(job).events(), asked, world=world)
    assert resized is not None
    assert resized.steps_lost == 0, resized
    print(f"\nlive: scale to {world}: {resized}")
    return asked


def _kept(session: Session, job: str, before: dict[str, tuple[int, ...]], pods: list[str]) -> bool:
    """Each of ``pods`` runs the very training processes it ran before."""
    now = session.worker_pids(job)
    return all(now.get(pod) == before[pod] for pod in pods)


def _store_process(session: Session, job: str, other_than: int | None = None) -> psutil.Process | None:
    """The job's rendezvous store process (its live rounds' store too), as the control plane wrote it down."""
    try:
        record = json.loads((session.home.job_dir(job) / "rendezvous.json").read_text())
        found = psutil.Process(int(record["pid"]))
        started = found.create_time()
    except (OSError, ValueError, KeyError, psutil.Error):
        return None
    same = abs(started - float(record["create_time"])) < 0.01 and found.pid != other_than
    return found if same else None


def test_survivors_keep_their_processes_through_a_kill_and_both_resizes(session: Session) -> None:
    # 24 epochs (about 540 steps): a newcomer that starts slowly on busy cores (17 s seen on a cold run, when
    # 8 epochs ended before it arrived) still finds the others training.
    spec = digits_job("digits-live", session.root, epochs=24, step_delay=0.05, checkpoint_every=10, live=True)
    # Each step of forming a round in the pods' logs: what a round that stalled waited for.
    spec["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "TRAINGUARD_LIVE_TRACE", "value": "1"}
    ]
    job = session.submit(spec)
    wait_step(session, job, 15)
    before = session.worker_pids(job)

    # 0. The store's process killed (what its pod's deletion is on Kubernetes): the control plane starts it
    # again on the job's port, empty; the workers train on in the same processes through its absence, and the
    # rounds after (the kill's, the resizes') form on the new store.
    store = _store_process(session, job)
    assert store is not None
    store.kill()
    lost_at = time.time()
    session.wait("the store started again", lambda: _store_process(session, job, other_than=store.pid), 60)
    reached = session.run(job).last_step()
    assert reached is not None
    wait_step(session, job, reached.step + 10)
    assert session.worker_pids(job) == before
    assert recovery(session.run(job).events(), lost_at) is None  # no round ended: nothing to recover from

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
    assert _kept(session, job, before, survivors)

    # 2. Scale out to 4: the newcomer joins; nobody restarts. 3. Scale in to 2: the two kept go on.
    grow_at = _resize(session, job, 4)
    assert _kept(session, job, before, survivors)
    shrink_at = _resize(session, job, 2)
    assert _kept(session, job, before, survivors)
    done = wait_done(session, job)
    assert done.fields["accuracy"] >= TARGET_ACCURACY
    starts = [e for e in session.run(job).events() if e.event == "start" and e.t > killed_at]
    # Rank 0's state came from a live process each time: its own, or a survivor's that had applied one step
    # more (a fault between two optimizers' steps); never a snapshot, the disk, or a fresh start.
    assert starts
    assert {e.fields["source"] for e in starts} <= {"live", "peer"}, starts

    # The job's history: the rounds of the kill and of both resizes, each once, in order; no restart counted.
    status = session.view(job)["status"]
    rounds = [entry for entry in status["history"] if entry["kind"] == "reformed"]
    numbers = [entry["reformation"]["round"] for entry in rounds]
    assert numbers == sorted(set(numbers)), rounds
    assert numbers[0] > 1, rounds  # the first formation is not one
    formed = [(entry["at"], entry["reformation"]["worldSize"]) for entry in rounds]
    assert [size for at, size in formed if killed_at <= at < grow_at], formed  # after the kill
    origins = [entry["reformation"]["origin"] for entry in rounds if killed_at <= entry["at"] < grow_at]
    assert "peer" in origins, rounds  # the replacement received the state from a survivor
    assert 4 in [size for at, size in formed if grow_at <= at < shrink_at], formed  # the scale-out
    assert [size for at, size in formed if at >= shrink_at][-1:] == [2], formed  # the scale-in
    assert all(entry["action"] == "none" and not entry["counted"] for entry in rounds), rounds
    assert status["restartCounts"] == {"worker": 0}, status["restartCounts"]
    kept = {pod["name"]: pod for pod in status["pods"] if pod["name"] in survivors}
    assert [(kept[pod]["restarts"], kept[pod]["hangRestarts"]) for pod in survivors] == [(0, 0), (0, 0)], kept


def test_a_live_job_whose_script_does_not_use_live_runs_as_without(session: Session) -> None:
    spec = digits_job("digits-unused", session.root, epochs=2, step_delay=0.0, checkpoint_every=10)
    spec["metadata"].setdefault("annotations", {})["trainguard.io/live"] = "true"  # but no --live
    job = session.submit(spec)
    wait_world(session, job, 3, after=0.0)  # under torchrun's agent after all: 3 workers in one round
    done = wait_done(session, job)
    assert done.fields["accuracy"] >= 0.5
    # The job says why live mode is not in use, once.
    warnings = [e for e in session.call("events", job=job, limit=200) if e["reason"] == "LiveModeUnused"]
    assert len(warnings) == 1, warnings
    assert "trainguard.Live" in warnings[0]["message"]
