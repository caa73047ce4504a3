"""Carrying out the controller's ``NudgeSurvivors`` on the local runtime (``trainguard.controller.nudges`` says
why and when): the worker processes of each surviving pod's torchrun agent that started before the failure
are SIGKILLed, and torchrun's agent restarts them into a new round. (SIGKILL, because a worker blocked inside
a collective runs no Python signal handler.) Workers younger than the failure have re-formed already and are
left alone.
"""

from __future__ import annotations

import contextlib
import time

import psutil

_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


def restart_workers(command: int | None, before: float) -> list[int]:
    """SIGKILL the workers under the torchrun agent ``command`` that started before ``before`` (epoch
    seconds); returns their pids."""
    if not command:
        return []
    killed = []
    for worker in workers(command):
        with contextlib.suppress(psutil.Error):
            if started_at(worker) < before:
                worker.kill()
                killed.append(worker.pid)
    return killed


def started_at(process: psutil.Process) -> float:
    """When ``process`` started, on the wall clock to a clock tick. psutil's ``create_time`` adds its start
    (clock ticks since boot) to the boot time in whole seconds (``btime``), so it is up to a second early: a
    worker that re-formed a moment after the failure would look older than it."""
    since_boot = process.create_time() - psutil.boot_time()
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) + since_boot


def workers(command: int) -> list[psutil.Process]:
    """The worker processes under a torchrun agent: its children, or the fork server's (warm start),
    without multiprocessing's helper processes."""
    try:
        children = psutil.Process(command).children()
    except psutil.Error:
        return []
    found = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            cmdline = " ".join(child.cmdline())
            if "multiprocessing.forkserver" in cmdline:
                found.extend(child.children())
            elif not any(helper in cmdline for helper in _HELPERS):
                found.append(child)
    return found
