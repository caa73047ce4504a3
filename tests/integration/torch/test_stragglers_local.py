"""A straggler slowed for real, found: example 1 with three workers on the local runtime, one worker's training
process held back by SIGSTOP bursts (its CPU share cut to about half); the agents measure each rank's own work
per step, and the controller names that worker a straggler, with its figures, once, and no other."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest
from torch_harness import brief, wait_step

from trainguard.demo.session import Session, digits_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

STEPS = 10
#: Each burst: stopped for this long, then running for as long.
BURST = 0.1


def _bursts(pids: tuple[int, ...], stop: threading.Event) -> None:
    while not stop.is_set():
        for sig in (signal.SIGSTOP, signal.SIGCONT):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    return
            time.sleep(BURST)


def test_a_worker_held_back_by_sigstop_bursts_is_found_a_straggler(session: Session) -> None:
    spec = digits_job("digits-slow", session.root, epochs=200, step_delay=0.02)
    spec["spec"]["faultCheck"] = {"periodSeconds": 0, "stragglers": {"steps": STEPS, "factor": 1.5}}
    job = session.submit(spec)
    wait_step(session, job, 5)
    slow = f"{job}-worker-1"
    pids = session.worker_pids(job)[slow]
    assert pids, brief(session, job)
    stop = threading.Event()
    bursts = threading.Thread(target=_bursts, args=(pids, stop), daemon=True)
    started = time.monotonic()
    bursts.start()
    try:
        # The agents report each 10 s, over the steps of the latest minute: a straggler within a few reports.
        found = session.wait(
            "a straggler in the history",
            lambda: [e for e in session.view(job)["status"]["history"] if e["kind"] == "straggler"],
            120,
        )
    finally:
        stop.set()
        bursts.join()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    took = time.monotonic() - started
    (entry,) = found
    assert entry["pod"] == slow, found
    figures = entry["straggler"]
    assert figures["steps"] >= STEPS
    assert figures["ratio"] >= 1.5
    assert figures["seconds"] > figures["others"]
    print(f"\nstraggler found {took:.0f} s after the bursts began: {entry['reason']}")
    assert any(
        e["reason"] == "Straggler" and slow in e["object"] for e in session.call("events", job=job, limit=50)
    )
