"""Example 3: CCE's Horovod example job on the local runtime, trained with Horovod's elastic API through a trainer
killed (the pod restarts and Horovod takes it back) and a scale-out (Horovod grows its world)."""

from __future__ import annotations

import time

import pytest
from horovod_harness import (
    RECOVERY_TIMEOUT,
    TARGET_ACCURACY,
    brief,
    example_job,
    trainguard,
    wait_done,
    wait_step,
    workers_in,
    worlds_after,
)

from trainguard.demo.session import Session

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

JOB = "test-horovod-elastic"
TRAINER = f"{JOB}-trainer"
#: About 22 steps an epoch at 3 workers (1437 images, 64 a step); paced so that faults land mid-training.
EPOCHS = 10
STEP_DELAY = 0.15
#: The kill lands mid-epoch, after a few commits (every 5 steps): survivors resume from a commit.
KILL_AFTER_STEP = 12


def test_a_killed_trainer_restarts_and_horovod_takes_it_back(session: Session) -> None:
    job = session.submit(example_job(session.root, epochs=EPOCHS, step_delay=STEP_DELAY))
    wait_step(session, job, world=3)
    session.wait("a few commits", lambda: _past(session, job, KILL_AFTER_STEP), RECOVERY_TIMEOUT, poll=0.2)

    killed_at = time.time()
    before = session.run(job).last_step()
    trainguard(session, "chaos", "kill", f"{TRAINER}-1")
    session.wait(
        "the killed trainer to run again",
        lambda: _running_again(session, job, f"{TRAINER}-1"),
        RECOVERY_TIMEOUT,
    )
    back = wait_step(session, job, after=killed_at, world=3, timeout=RECOVERY_TIMEOUT)
    assert workers_in(session, job, f"{TRAINER}-1"), (
        f"no Horovod worker in the restarted pod: {brief(session, job)}"
    )
    worlds = worlds_after(session, job, killed_at)
    assert worlds[-1] == 3, worlds
    assert worlds[0] == 2, f"training should go on without the killed trainer first: worlds {worlds}"

    done = wait_done(session, job)
    assert done.fields["accuracy"] >= TARGET_ACCURACY, done.fields
    view = session.view(job)
    faults = [
        (e["pod"], e["fault"], e["rule"], e["action"])
        for e in view["status"]["history"]
        if e["kind"] == "fault"
    ]
    assert faults == [(f"{TRAINER}-1", "Exited", "restartPolicy", "restart")]
    assert view["status"]["restartCounts"] == {"launcher": 0, "trainer": 1}
    print(
        f"killed after step {before.step if before else 0}; back at 3 workers from step {back.step}; worlds after the kill {worlds}; "
        f"back to 3 workers {back.t - killed_at:.1f} s after the kill; accuracy {done.fields['accuracy']:.4f}"
    )


def test_scaling_trainers_out_grows_the_horovod_world(session: Session) -> None:
    job = session.submit(example_job(session.root, epochs=EPOCHS, step_delay=STEP_DELAY))
    wait_step(session, job, world=3)

    scaled_at = time.time()
    trainguard(session, "scale", job, "--role", "trainer", "--replicas", "4")
    grown = wait_step(session, job, after=scaled_at, world=4, timeout=RECOVERY_TIMEOUT)
    assert workers_in(session, job, f"{TRAINER}-3"), brief(session, job)
    assert worlds_after(session, job, scaled_at) == [4]

    done = wait_done(session, job)
    assert done.fields["accuracy"] >= TARGET_ACCURACY, done.fields
    assert done.world == 4
    view = session.view(job)
    assert view["status"]["replicas"]["trainer"] == 4
    assert [e["action"] for e in view["status"]["history"] if e["kind"] == "scale"] == ["scaleout"]
    print(f"4 workers {grown.t - scaled_at:.1f} s after the scale; accuracy {done.fields['accuracy']:.4f}")


def _running_again(session: Session, job: str, pod: str) -> bool:
    seen = session.pods(job)[pod]
    return bool(seen["restarts"] == 1 and seen["phase"] == "Running")


def _past(session: Session, job: str, step: int) -> bool:
    last = session.run(job).last_step()
    return last is not None and last.step >= step
