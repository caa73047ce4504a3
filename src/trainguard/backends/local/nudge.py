"""Carrying out the controller's ``NudgeSurvivors`` on the local runtime (``trainguard.controller.nudges`` says
why and when): the worker processes of each surviving pod's torchrun agent that started before the failure
are SIGKILLed, and torchrun's agent restarts them into a new round. (SIGKILL, because a worker blocked inside
a collective runs no Python signal handler.) Workers younger than the failure have re-formed already and are
left alone.
"""

from __future__ import annotations

import contextlib

import psutil

from trainguard.agent.nudge import kill_workers_older_than

_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


def restart_workers(command: int | None, before: float) -> list[int]:
    """SIGKILL the workers under the torchrun agent ``command`` that started before ``before`` (epoch
    seconds); returns their pids. The agent's own nudge does it (``trainguard.agent.nudge``): the same workers,
    their starts on the wall clock, and a pid reused meanwhile never signalled."""
    if not command:
        return []
    return kill_workers_older_than(command, before)


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
