"""Hot spares (``trainguard.io/live-spares``) on the local runtime: each pod of example 1 in live mode keeps a
spare worker, warm and holding no rank; a killed worker's place is taken by its pod's spare (no cold start),
the world is whole again with 0 steps lost, and the pod starts a new spare behind it."""

from __future__ import annotations

import time

import psutil
import pytest
from torch_harness import RECOVERY_TIMEOUT, wait_done, wait_step, workers_of

from trainguard.backends.local.views import pods_table
from trainguard.demo.session import Session, digits_job, recovery
from trainguard.pod.livelaunch import started_as_spare

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _split(processes: list[psutil.Process]) -> tuple[list[int], list[int]]:
    """A pod's worker processes: (those that hold a rank or were called, the spares started as such), by pid.
    A spare is started with its pipe's descriptor in its environment (which ``/proc`` keeps as it started)."""
    workers, spares = [], []
    for process in processes:
        (spares if started_as_spare(process.pid) else workers).append(process.pid)
    return sorted(workers), sorted(spares)


def _ready(session: Session, job: str) -> list[int | None]:
    """Each pod's spares ready, as the job's status says (its agent's report)."""
    return [pod.get("spares") for pod in session.view(job)["status"]["pods"]]


def test_a_killed_workers_place_is_taken_by_its_pods_spare_and_a_new_spare_starts(session: Session) -> None:
    spec = digits_job(
        "digits-spare", session.root, epochs=12, step_delay=0.05, checkpoint_every=10, live=True, spares=1
    )
    job = session.submit(spec)
    wait_step(session, job, 15)
    pod = "digits-spare-worker-1"

    # One worker and one spare, each as it was started: a process just forked has its launcher's environment
    # in /proc until it runs its own program, so the split is waited on, not its count of processes alone.
    def started() -> tuple[list[int], list[int]] | None:
        split = _split(workers_of(session, job, pod))
        return split if [len(part) for part in split] == [1, 1] else None

    [active], [spare] = session.wait("the pod's worker and its spare started", started, 60)
    session.wait("each pod's spare ready in the job's status", lambda: _ready(session, job) == [1, 1, 1], 120)
    others = {
        name: session.worker_pids(job)[name] for name in ("digits-spare-worker-0", "digits-spare-worker-2")
    }

    # What a crashed training process is: the worker alone killed, its launcher lives on.
    said = session.chaos("kill", pod, worker=True)
    killed_at = time.time()
    assert said == f"pod {pod}: worker pid {active} killed (SIGKILL); its launcher goes on"
    # The first round of 3 formed after the kill, and its first step (a step of the old round may still be
    # written just after the kill: the killed worker had done its part of it).
    back = session.wait(
        "the world whole again",
        lambda: recovery(session.run(job).events(), killed_at, world=3),
        RECOVERY_TIMEOUT,
    )
    assert back.steps_lost == 0, back
    print(f"\nspare: a killed worker -> the world whole again in {back.seconds:.2f} s ({back})")

    # The world of 3 holds the spare: the only other process of the pod is the new spare, which waits uncalled.
    def replaced() -> tuple[list[int], list[int]] | None:
        split = _split(workers_of(session, job, pod))
        return split if len(split[1]) == 2 else None

    workers, spares = session.wait("a new spare behind the called one", replaced, 60)
    assert active not in workers + spares
    assert spare in spares  # started as a spare ...
    assert psutil.Process(spare).is_running()  # ... and training now
    assert workers == []  # the failed worker's slot starts again as a spare, never cold in the world
    assert {name: session.worker_pids(job)[name] for name in others} == others  # the survivors kept theirs

    # The new spare warms up and is counted ready again; get shows each pod's.
    session.wait("the new spare ready", lambda: _ready(session, job) == [1, 1, 1], 120)
    table = pods_table(session.view(job))
    assert table.splitlines()[0].split()[:7] == [
        "POD",
        "ROLE",
        "NODE",
        "PHASE",
        "RESTARTS",
        "HANG-RESTARTS",
        "SPARES",
    ]

    done = wait_done(session, job)
    assert done.fields["accuracy"] >= 0.9
    status = session.view(job)["status"]
    assert status["restartCounts"] == {"worker": 0}, status["restartCounts"]
    # The history says what happened in the pod: its spare took the killed worker's place (not counted).
    [taken] = [
        entry for entry in status["history"] if entry.get("pod") == pod and entry.get("kind") == "fault"
    ]
    assert "the pod's hot spare took its place" in taken["reason"], taken
    assert not taken["counted"]


def test_spares_without_live_mode_are_refused_with_the_fix(session: Session) -> None:
    spec = digits_job("digits-nolive", session.root, epochs=1, spares=1)
    with pytest.raises(Exception, match=r"trainguard.io/live-spares.*live mode.*trainguard.io/live"):
        session.submit(spec)
