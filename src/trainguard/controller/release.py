"""Releasing the survivors of a lost Horovod host: a decision of the controller, carried out by each pod's agent.

When a trainer of a Horovod job is lost (its node NotReady, its pod deleted by force, its process ended or
killed), the other workers learn it from their own connections only if a packet tells them. A node that
vanished sends none, and a pod whose network is torn down before its processes' sockets close sends none
either: the survivors then sit in a Gloo collective until ``HOROVOD_GLOO_TIMEOUT_SECONDS`` (300 s in CCE's
example), every GPU of the job idle. The controller knows at once. With the fault it records (the lost pod's
address is in the entry), it asks the backend to close the connections of every other running pod of the job
to that address (``ReleaseSurvivors``): their collective fails at once and Horovod's elastic reset starts,
as when a peer's kernel resets a connection. The launcher is among them: its ssh to the lost host ends too,
so horovodrun counts that worker failed at once. In the other hosts' pods the connections among them (but
ssh's) are closed as well: at once where that pod is still in the lost host's round, so that the hosts leave it
together (one that left alone would ask its peers, still inside the previous collective, for its next one's
data on Gloo's one slot, and Gloo would end it on the answer); and, in every host's pod, those that stayed
quiet a few seconds later: a host whose own connection to the lost one was reset starts the next round by
itself, but Horovod 0.28.1 keeps the previous round's connections open, and a host still blocked on one of
them (in its shutdown's last collective) would wait for it until the timeout, as for the lost one.

This widens nothing: no pod is restarted or stopped, no process killed, the policy's decision about the
lost pod stands as it was, and the lost address is not blacklisted anywhere (the connections to it are closed
once; a new pod that later gets the address is a new peer).

It is decided once per loss (its key names the fault's history entry) and recorded in the history as a
``release`` entry. A backend that could release but is told not to (``ReleaseMode.OFF``, the operator's
``--no-release-survivors``) gets a ``release`` entry with the outcome ``wait``, whose reason says how long
the survivors may wait and why; one that cannot (``ReleaseMode.NONE``: the local runtime's pods share one
address) is left alone.
"""

from __future__ import annotations

from trainguard.api import FrameworkType
from trainguard.controller import keys
from trainguard.controller.backend import EventType, ObservedPhase, ReleaseMode, ReleaseSurvivors
from trainguard.controller.cycle import Cycle
from trainguard.controller.scaling import is_launcher
from trainguard.controller.status import HistoryEntry, HistoryKind, ReleaseOutcome
from trainguard.policy.types import FaultKind

#: A loss older than this is not released any more (its survivors have timed out, or are fine).
FORGET_AFTER_SECONDS = 600.0
#: Faults that end the pod's processes, or leave them unreachable.
RELEASED_FAULTS = frozenset(
    {
        FaultKind.NODE_NOT_READY,
        FaultKind.POD_FORCE_DELETED,
        FaultKind.EXITED,
        FaultKind.OOM_KILLED,
        FaultKind.POD_EVICTED,
    }
)
#: A release names again the addresses released this long before (a replaced line its agent may have missed).
RECENT_SECONDS = 60.0
#: Where Horovod's Gloo timeout is set, for the words of an entry that says why the survivors wait.
GLOO_TIMEOUT = "HOROVOD_GLOO_TIMEOUT_SECONDS"


def release_survivors(cycle: Cycle) -> None:
    """Issue the release due now: one for all the lost Horovod hosts not released yet (a node that dies takes
    several at once, and a pod's release file holds one line), naming as well those lost within
    ``RECENT_SECONDS`` (a line its agent may not have read before this one replaced it)."""
    mode = cycle.observed.release
    if mode is ReleaseMode.NONE or cycle.job.spec.framework_type is not FrameworkType.HOROVOD:
        return
    if cycle.phase.is_terminal:
        return
    due: list[HistoryEntry] = []
    recent: list[HistoryEntry] = []
    for entry in reversed(list(cycle.history)):
        if cycle.now >= entry.at + FORGET_AFTER_SECONDS:
            break  # the history is in time order: everything before is older still
        if not _lost_host(cycle, entry):
            continue
        if keys.release(cycle.job, str(entry.pod), entry.seq) not in cycle.issued:
            due.append(entry)
        elif cycle.now < entry.at + RECENT_SECONDS:
            recent.append(entry)
    if due:
        _release(cycle, due[::-1], recent, mode)


def _lost_host(cycle: Cycle, entry: HistoryEntry) -> bool:
    return (
        entry.kind is HistoryKind.FAULT
        and entry.fault in RELEASED_FAULTS
        and entry.pod is not None
        and entry.address is not None
        and entry.role is not None
        and entry.role in cycle.job.spec.replica_specs
        and not is_launcher(cycle, entry.role)
    )


def _release(cycle: Cycle, lost: list[HistoryEntry], recent: list[HistoryEntry], mode: ReleaseMode) -> None:
    lost_pods = {str(entry.pod) for entry in lost}
    addresses = tuple(dict.fromkeys(str(entry.address) for entry in (*lost, *recent)))
    slots = cycle.slots
    survivors = tuple(
        observed.name
        for observed in cycle.observed.pods
        if observed.name not in lost_pods
        and observed.phase is ObservedPhase.RUNNING
        and not observed.terminating
        and observed.address not in addresses
        and (slot := slots.get(observed.name)) is not None
        and slot.generation == observed.generation
    )
    if not survivors:
        return
    first = lost[0]
    key = keys.release(cycle.job, str(first.pod), first.seq)
    token = f"{first.pod}#{first.seq}" + (f"+{len(lost) - 1}" if len(lost) > 1 else "")
    if mode is ReleaseMode.ON:
        hosts = tuple(
            observed
            for observed in cycle.observed.pods
            if observed.name in survivors and observed.address and not is_launcher(cycle, observed.role)
        )
        peers = tuple(sorted({str(observed.address) for observed in hosts}))
        names = tuple(observed.name for observed in hosts)
        cycle.issue(ReleaseSurvivors(key, str(first.pod), token, addresses, survivors, names, peers))
    for entry in lost:
        cycle.issued[keys.release(cycle.job, str(entry.pod), entry.seq)] = None  # decided: once
        _record(cycle, entry, survivors, mode)


def _record(cycle: Cycle, lost: HistoryEntry, survivors: tuple[str, ...], mode: ReleaseMode) -> None:
    pod, address = str(lost.pod), str(lost.address)
    if mode is ReleaseMode.ON:
        reason = (
            f"{pod} ({address}) was lost ({lost.fault}): the connections of {', '.join(survivors)} to it are "
            "closed, so that Horovod's elastic reset starts now rather than after the Gloo timeout"
        )
        outcome, event_type, event_reason = ReleaseOutcome.RELEASED, EventType.NORMAL, "ReleaseSurvivors"
    else:
        reason = (
            f"{pod} ({address}) was lost ({lost.fault}) and the survivors are not released (the operator runs "
            f"with --no-release-survivors): {', '.join(survivors)} may wait on it until Horovod's Gloo timeout "
            f"({GLOO_TIMEOUT}) before the elastic reset"
        )
        outcome, event_type, event_reason = ReleaseOutcome.WAITS, EventType.WARNING, "SurvivorsWait"
    cycle.record(
        HistoryEntry(
            at=cycle.now,
            kind=HistoryKind.RELEASE,
            role=lost.role,
            pod=pod,
            pods=survivors,
            node=lost.node,
            address=address,
            fault=lost.fault,
            action=outcome,
            reason=reason,
        )
    )
    cycle.emit(event_type, event_reason, reason, pod)
