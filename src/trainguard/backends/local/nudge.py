"""Nudging the survivors of a torchrun job after one of its pods failed.

When a worker dies, its peers usually learn it from their own connections: the kernel resets them, the
collective in progress fails at once, and torchrun restarts its workers into a new round. Sometimes they do
not: a machine that vanished resets nothing, and a peer may be blocked elsewhere (a long step, I/O) rather than
in a collective. Then each survivor waits until its collective times out (gloo: 30 minutes, NCCL: 10) before
the job re-forms. trainguard knows better, and sooner: once a pod of a torchrun job has failed (a non-zero
exit, its node lost, deleted behind trainguard's back), the workers of every other pod that were started
before the failure and are still there ``NUDGE_AFTER_SECONDS`` later are SIGKILLed. Their agent sees its
workers fail and restarts them into the next round, as for any other worker failure; workers that already
restarted are younger than the failure and are left alone. (SIGKILL, because a worker blocked inside a
collective runs no Python signal handler.)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable

import psutil

from trainguard.api import TrainingJob
from trainguard.backends.local.records import EventRecord, PodRecord, PodState
from trainguard.backends.local.store import Store
from trainguard.controller.launch import torchrun_roles

log = logging.getLogger("trainguard.local")

#: Survivors normally re-form within a second or two on their own; a nudge comes only after this long.
NUDGE_AFTER_SECONDS = 5.0
#: A failure is remembered this long, so that it is nudged once even if its row is seen again meanwhile.
_FORGET_AFTER_SECONDS = 600.0
_HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")


class Nudger:
    def __init__(self, store: Store, child_pid: Callable[[PodRecord], int | None]) -> None:
        self.store = store
        #: The pod's command (torchrun's agent) as the pod's agent reports it.
        self.child_pid = child_pid
        #: (pod, launch) of failures seen -> when; each failure nudges at most once.
        self._failures: dict[tuple[str, int], float] = {}
        self._nudged: set[tuple[str, int]] = set()

    def observe(self, job: TrainingJob, rows: Iterable[PodRecord], now: float) -> None:
        roles = set(torchrun_roles(job))
        if not roles:
            return
        rows = [row for row in rows if row.role in roles]
        for row in rows:
            if _failed(row):
                self._failures.setdefault((row.name, row.launch), row.finished_at or now)
        for failure, failed_at in list(self._failures.items()):
            if failure in self._nudged:
                if now > failed_at + _FORGET_AFTER_SECONDS:
                    del self._failures[failure]
                    self._nudged.discard(failure)
                continue
            if now < failed_at + NUDGE_AFTER_SECONDS:
                continue
            self._nudged.add(failure)
            killed = [
                (row.name, pid)
                for row in rows
                if row.state is PodState.RUNNING and row.name != failure[0]
                for pid in self._nudge(row, failed_at)
            ]
            if killed:
                pods = ", ".join(sorted({name for name, _ in killed}))
                message = (
                    f"{failure[0]} failed {now - failed_at:.0f} s ago and the workers of {pods} still run the "
                    "round it was in: restarting them into a new round"
                )
                log.info("job %s: %s", job.name, message)
                self.store.append_event(
                    EventRecord(job.name, now, "Normal", "NudgeSurvivors", job.name, message)
                )

    def _nudge(self, row: PodRecord, failed_at: float) -> list[int]:
        command = self.child_pid(row)
        if not command:
            return []
        killed = []
        for worker in workers(command):
            with contextlib.suppress(psutil.Error):
                if worker.create_time() < failed_at:
                    worker.kill()
                    killed.append(worker.pid)
        return killed


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


def _failed(row: PodRecord) -> bool:
    if row.state is PodState.LOST:
        return True
    if row.state is PodState.EXITED:
        return row.exit_code not in (0, None)
    return row.state is PodState.DELETED and not row.deleted_by_us
