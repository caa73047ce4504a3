"""Example 1 (DDP on the digits, gloo) on the local runtime, through the faults it must survive.

Each test trains one real job: 3 workers under torchrun's elastic agent in trainguard's rendezvous, paced so
that the faults land mid-training, and checks that it still reaches the example's stated test accuracy.
"""

from __future__ import annotations

import time

import pytest
from torch_harness import (
    RECOVERY_TIMEOUT,
    HeldSockets,
    can_hold_sockets,
    checkpoint_steps,
    torchrun_of,
    wait_done,
    wait_step,
    wait_world,
    workers_of,
)

from trainguard.controller.nudges import NUDGE_AFTER_SECONDS
from trainguard.demo.session import Session, digits_job, recovery

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

#: The accuracy examples/digits/digits.yaml promises.
TARGET_ACCURACY = 0.95
EVERY = 10  # steps between checkpoints


def _job(session: Session, name: str, epochs: int = 8, **extra: object) -> dict[str, object]:
    # 0.15 s of sleep a step: with one OpenMP thread a worker (the local runtime's default) steps in about 0.07 s
    # on the loaded machine, and a 10-epoch job at 0.05 s had ended 23 s after a scale request, before its two
    # new pods (cold torchruns) could join it. Sleep costs no CPU; each joiner's window is a fault's recovery.
    return digits_job(name, session.root, epochs=epochs, step_delay=0.15, checkpoint_every=EVERY, **extra)  # type: ignore[arg-type]


def test_a_killed_worker_and_a_lost_node_cost_at_most_a_checkpoint_interval(session: Session) -> None:
    # 14 epochs (about 320 steps): the killed pod's replacement, a cold torchrun and fork server, reached the
    # rendezvous 32 s after the kill beside the suite's other lane (load 10 on 2 cores), when the survivors of
    # an 8-epoch job had just ended it; it must join a job still training, and the node's loss come after.
    job = session.submit(_job(session, "digits", epochs=14))
    wait_step(session, job, 15)

    # The training process alone: torchrun restarts it inside the pod, and the history records it.
    (worker,) = workers_of(session, job, "digits-worker-2")
    worker.kill()
    killed_at = time.time()
    wait_world(session, job, 3, after=killed_at)
    inside = session.wait(
        "the restart inside the pod in the history",
        lambda: _worker_restarts(session, job, "digits-worker-2"),
        30,
    )
    assert {key: inside[0][key] for key in ("pod", "fault", "exitCode", "action", "rule", "counted")} == {
        "pod": "digits-worker-2",
        "fault": "Exited",
        "exitCode": 137,
        "action": "restart-workers",
        "rule": "torchrun",
        "counted": False,
    }
    events = session.call("events", job=job)
    assert any(e["reason"] == "WorkersRestarted" and e["object"] == "digits-worker-2" for e in events), events
    assert session.pods(job)["digits-worker-2"]["restarts"] == 0  # the pod went on: nothing relaunched
    wait_step(session, job, 25)

    session.chaos("kill", "digits-worker-1")  # SIGKILL of the pod's torchrun agent and its worker
    killed_at = time.time()
    # A step the three completed before they noticed the kill can be logged after it: wait on the restart.
    lost = session.wait(
        "the restart after the kill", lambda: recovery(session.run(job).events(), killed_at), RECOVERY_TIMEOUT
    )
    wait_world(session, job, 3, after=lost.next_step_at)  # the survivors went on, then the replacement joined
    assert lost.steps_lost <= EVERY
    assert lost.seconds < RECOVERY_TIMEOUT

    # The node of rank 0, whose worker hosted the workers' store: the rendezvous lives outside every node.
    step = wait_step(session, job, lost.step_before + 20).step
    node = session.pods(job)["digits-worker-0"]["node"]
    session.chaos("node-down", node)
    down_at = time.time()
    after = session.wait(
        "recovery from node-down", lambda: recovery(session.run(job).events(), down_at), RECOVERY_TIMEOUT
    )
    assert after.resumed_from >= step - EVERY

    done = wait_done(session, job)
    assert done.fields["accuracy"] >= TARGET_ACCURACY
    history = session.view(job)["status"]["history"]
    pod_faults = [e for e in history if e["kind"] == "fault" and e["action"] != "restart-workers"]
    assert [entry["fault"] for entry in pod_faults] == ["Exited", "NodeNotReady"]


def _worker_restarts(session: Session, job: str, pod: str) -> list[dict[str, object]] | None:
    """The history's restarts of ``pod``'s workers inside the pod (torchrun's), if there are any yet."""
    history = session.view(job)["status"]["history"]
    found = [entry for entry in history if entry.get("action") == "restart-workers" and entry["pod"] == pod]
    return found or None


@pytest.mark.timeout(900)
def test_scale_3_to_5_to_2_while_training(session: Session) -> None:
    job = session.submit(_job(session, "digits-scale", epochs=14))
    wait_step(session, job, 20)

    asked = time.time()
    session.scale(job, "worker", 5)
    # Two cold pods (importing torch) and up to two re-formations, one per pod that joins: on a busy 2-core
    # machine (the real-node tests beside this one), longer than one recovery.
    wait_world(session, job, 5, after=asked, timeout=2 * RECOVERY_TIMEOUT)
    session.scale(job, "worker", 2)
    resized = time.time()
    two = wait_world(session, job, 2, after=resized)

    done = wait_done(session, job)
    assert done.fields["accuracy"] >= TARGET_ACCURACY
    assert done.world == 2
    grown = recovery(session.run(job).events(), asked, world=5)
    assert grown is not None
    assert grown.steps_lost <= EVERY
    shrunk = recovery(session.run(job).events(), resized, world=2)
    assert shrunk is not None
    assert shrunk.next_step_at == two.t
    assert shrunk.steps_lost <= EVERY
    operations = [
        entry["action"] for entry in session.view(job)["status"]["history"] if entry["kind"] == "scale"
    ]
    assert operations == ["scaleout", "scalein"]


def test_a_restart_of_scope_all_resumes_from_the_previous_checkpoint_when_the_latest_is_corrupt(
    session: Session,
) -> None:
    # Without a checkpoint on SIGTERM: the restart of scope All stops the other workers, and a slow machine
    # would let them save a fresh checkpoint past the corrupt one.
    spec = _job(session, "digits-all", extra_args=("--no-save-on-sigterm",))
    worker = spec["spec"]["replicaSpecs"]["worker"]  # type: ignore[index]
    worker["faultTolerantPolicy"] = [{"exitCodes": "137", "restartPolicy": "ExitCode", "restartScope": "All"}]
    job = session.submit(spec)
    directory = session.root / job / "checkpoints"
    session.wait("two checkpoints", lambda: len(checkpoint_steps(directory)) >= 2, 180, poll=0.05)

    *_, previous, latest = checkpoint_steps(directory)
    path = directory / f"ckpt-{latest:012d}.pt"
    path.write_bytes(path.read_bytes()[:100])  # cut short, as a crash during a copy would leave it
    session.chaos("kill", "digits-all-worker-2")
    killed_at = time.time()

    # The first start after the kill (a round may form with fewer workers first, on a slow machine: its own
    # checkpoints would then come after the damaged one).
    again = session.wait(
        "the restart", lambda: recovery(session.run(job).events(), killed_at), RECOVERY_TIMEOUT
    )
    assert again.resumed_from == previous  # not the damaged one, and not from scratch
    assert (directory / f"ckpt-{latest:012d}.pt.corrupt").exists()
    # The killed pod's fault (the survivors' torchrun may record restarting their workers before it).
    entry = next(
        e
        for e in session.view(job)["status"]["history"]
        if e["kind"] == "fault" and e["pod"] == "digits-all-worker-2" and e["action"] != "restart-workers"
    )
    assert (entry["action"], entry["scope"]) == ("restart", "All")
    assert wait_done(session, job).fields["accuracy"] >= TARGET_ACCURACY


@pytest.mark.skipif(not can_hold_sockets(), reason="pidfd_getfd is not available or not permitted here")
def test_survivors_of_a_silently_vanished_node_are_restarted_into_a_new_round(session: Session) -> None:
    """A machine that vanishes resets none of its connections: the survivors would wait in their allreduce
    for gloo's 30-minute timeout. trainguard knows the pod is gone and restarts their workers."""
    job = session.submit(_job(session, "digits-silent", epochs=10))
    wait_step(session, job, 20)

    held = HeldSockets()
    try:
        victim = [
            torchrun_of(session, job, "digits-silent-worker-1"),
            *workers_of(session, job, "digits-silent-worker-1"),
        ]
        assert held.take(victim) > 0
        survivors = {
            p.pid
            for pod in ("digits-silent-worker-0", "digits-silent-worker-2")
            for p in workers_of(session, job, pod)
        }
        session.chaos("node-down", session.pods(job)["digits-silent-worker-1"]["node"])
        down_at = time.time()
        back = session.wait(
            "recovery", lambda: recovery(session.run(job).events(), down_at), RECOVERY_TIMEOUT
        )
        assert back.seconds < NUDGE_AFTER_SECONDS + 30
        assert not survivors & {
            p.pid
            for pod in ("digits-silent-worker-0", "digits-silent-worker-2")
            for p in workers_of(session, job, pod)
        }
        events = session.call("events", job=job)
        assert any(event["reason"] == "NudgeSurvivors" for event in events)
    finally:
        held.close()
    assert wait_done(session, job).fields["accuracy"] >= TARGET_ACCURACY
