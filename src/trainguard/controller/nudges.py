"""Nudging the survivors of a torchrun job after one of its pods failed: a decision of the controller, carried
out by every backend.

When a worker dies, its peers usually learn it from their own connections: the kernel resets them, the
collective in progress fails at once, and torchrun's agent restarts its workers into a new round. Sometimes
they do not: a machine that vanished resets nothing, and a peer may be blocked elsewhere (a long step, I/O)
rather than in a collective. Then each survivor waits until its collective times out (gloo: 30 minutes,
NCCL: 10) before the job re-forms. The controller knows sooner: once a pod of a torchrun role has failed (a
non-zero exit, an OOM kill, its node lost, deleted behind trainguard's back) and the failure is
``NUDGE_AFTER_SECONDS`` old, it asks the backend to restart the workers of every other running pod of those
roles that started before the failure (``NudgeSurvivors``): their agents see their workers fail and restart
them into the next round. Only workers older than the failure are restarted; younger ones already re-formed.

The decision follows from the status history and the observation alone: its key names the failure, so it is
issued once per failure, by whichever controller (or operator replica) gets there first, and never again
after a restart. Only the latest failure due is sent: restarting every worker older than it covers the
earlier ones. A failure older than ``FORGET_AFTER_SECONDS`` is not acted on any more.
"""

from __future__ import annotations

from trainguard.controller import keys
from trainguard.controller.backend import EventType, NudgeSurvivors, ObservedPhase
from trainguard.controller.cycle import Cycle
from trainguard.controller.status import HistoryEntry, HistoryKind
from trainguard.controller.torchrun_command import is_live, torchrun_roles
from trainguard.policy.types import FaultKind

#: Survivors normally re-form within a second or two on their own; a nudge comes only after this long.
NUDGE_AFTER_SECONDS = 5.0
#: A failure older than this is not nudged any more (a survivor that still waits has other trouble).
FORGET_AFTER_SECONDS = 600.0
#: The faults after which peers may be left waiting: the pod is gone or its process ended badly.
NUDGED_FAULTS = frozenset(
    {FaultKind.EXITED, FaultKind.OOM_KILLED, FaultKind.NODE_NOT_READY, FaultKind.POD_FORCE_DELETED}
)


def nudge_survivors(cycle: Cycle) -> float | None:
    """Issue the nudge due now, if any; returns when a failure not old enough yet becomes due (or None)."""
    if cycle.phase.is_terminal:
        return None
    if is_live(cycle.job):  # live workers leave a broken group themselves; nothing of theirs is killed
        return None
    roles = set(torchrun_roles(cycle.job))
    if not roles:
        return None
    now = cycle.now
    due: HistoryEntry | None = None
    wake: float | None = None
    for entry in reversed(cycle.history):
        if now >= entry.at + FORGET_AFTER_SECONDS:
            break  # the history is in time order: everything before is older still
        if not _nudged(entry, roles):
            continue
        if now < entry.at + NUDGE_AFTER_SECONDS:
            wake = (
                entry.at + NUDGE_AFTER_SECONDS if wake is None else min(wake, entry.at + NUDGE_AFTER_SECONDS)
            )
        elif due is None:
            due = entry
    if due is not None:
        _nudge(cycle, due, roles)
    return wake


def _nudged(entry: HistoryEntry, roles: set[str]) -> bool:
    return (
        entry.kind is HistoryKind.FAULT
        and entry.fault in NUDGED_FAULTS
        and not (entry.fault is FaultKind.EXITED and entry.exit_code == 0)
        and entry.pod is not None
        and entry.role in roles
    )


def _nudge(cycle: Cycle, failure: HistoryEntry, roles: set[str]) -> None:
    key = keys.nudge(cycle.job, str(failure.pod), failure.seq)
    if key in cycle.issued:
        return
    slots = cycle.slots
    survivors = tuple(
        pod.name
        for pod in cycle.observed.pods
        if pod.name != failure.pod
        and pod.role in roles
        and pod.phase is ObservedPhase.RUNNING
        and not pod.terminating
        and pod.started_at is not None
        and pod.started_at <= failure.at  # ran before it (the same instant on a virtual clock)
        and (slot := slots.get(pod.name)) is not None
        and slot.generation == pod.generation
    )
    if not survivors:
        return
    token = f"{failure.pod}#{failure.seq}"
    if cycle.issue(NudgeSurvivors(key, str(failure.pod), token, failure.at, survivors)):
        message = (
            f"{failure.pod} failed {cycle.now - failure.at:.0f} s ago and the workers of {', '.join(survivors)} "
            "may still wait in the round it was in: restarting those started before the failure into a new round"
        )
        cycle.emit(EventType.NORMAL, "NudgeSurvivors", message)
