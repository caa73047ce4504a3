"""Bringing the pod slots up to date with what the backend shows, and acting on every fault found.

An observed pod counts only as its slot's current incarnation (same generation); older incarnations are
already replaced and are just removed (``actuate``). So a fault is decided once: the decision moves the slot
to a new generation (restart), to a restart in place (whose number the agent reports back), or to an end
(failed, shrunk), and the same observation seen again no longer matches anything to decide. Decisions only
change the status; ``actuate`` derives the actions from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from trainguard.api import RestartScope
from trainguard.controller import fencing, keys
from trainguard.controller.backend import EventType, ObservedPhase, ObservedPod
from trainguard.controller.cycle import Cycle
from trainguard.controller.faultcheck import carry_out_check, check_of, decide_check, is_check_fault
from trainguard.controller.incarnations import adopt, incarnation
from trainguard.controller.phases import ALIVE_PHASES, LAUNCHED_PHASES, PodPhase
from trainguard.controller.status import HistoryEntry, HistoryKind, PodStatus
from trainguard.policy import (
    apply_decision,
    classify,
    decide,
    record_progress,
    record_running,
    start_timed_out,
    torchrun_restarted,
)
from trainguard.policy.types import Decision, Fault, FaultKind, Observation, PodRef, Remedy

#: Faults that say nothing about the program, only about where it ran: a role shrunk for one of these
#: grows back when capacity returns. (A program that keeps failing is not started again by growing.)
CAPACITY_FAULTS = frozenset(
    {FaultKind.NODE_NOT_READY, FaultKind.POD_FORCE_DELETED, FaultKind.POD_EVICTED, FaultKind.START_TIMEOUT}
)


def observe_pods(cycle: Cycle, *, decide_faults: bool = True) -> None:
    """Update every launched slot from its current incarnation; with ``decide_faults``, act on faults."""
    slots = cycle.slots
    settled = _settled_slots(cycle)
    for name in cycle.ordered_names():
        slot = slots[name]  # an earlier decision of this loop may have changed it
        pods = cycle.observed_pods(name)
        known = settled.get(name)
        if known is not None and known[0] is slot and len(pods) == 1 and pods[0] is known[1]:
            node = cycle.node(pods[0].node)
            if node is None or node.ready:
                continue  # the same slot, the same pod, on a node still Ready (or not listed)
        before = cycle.state, len(cycle.actions), len(cycle.history)
        running = _observe(cycle, slot, pods, decide_faults=decide_faults)
        if running is not None and slots[name] is slot and (cycle.state, *_counts(cycle)) == before:
            settled[name] = (slot, running)


def _observe(
    cycle: Cycle, slot: PodStatus, pods: Sequence[ObservedPod], *, decide_faults: bool
) -> ObservedPod | None:
    """Bring one slot up to date and act on its fault; returns its pod if it is the only one listed and runs
    with no fault (then, if nothing changed either, the slot is settled)."""
    slot = adopt(cycle, slot, pods)
    if slot.phase not in LAUNCHED_PHASES:
        return None
    current = incarnation(pods, slot.generation)
    if current is not None:
        slot = _note(cycle, slot, current)
        slot = _record_worker_restarts(cycle, slot, current)
    fault = _fault_of(cycle, slot, current)
    if fault is None:
        _follow(cycle, slot, current, decide_faults=decide_faults)
    elif decide_faults:
        act_on(cycle, fault, current)
    else:
        _record_end(cycle, slot, current)
    if fault is None and current is not None and current.phase is ObservedPhase.RUNNING and len(pods) == 1:
        return current
    return None


def _counts(cycle: Cycle) -> tuple[int, int]:
    return len(cycle.actions), len(cycle.history)


# ---- slots that are settled -----------------------------------------------------------------------------
#
# Most pods of a big job are, on most reconciles, exactly as the last reconcile left them: running, seen,
# nothing new from their agent. For such a slot ``_observe`` changes nothing, and what it reads is only the
# slot, its one pod, and whether that pod's node is Ready: not the time (a Running pod's slot already has
# its running_since; starting deadlines are for pods not yet Running), not the policy state (no fault, no
# new start, no progress to record). So once a slot was found to need nothing, the same slot object with the
# same pod object on a Ready node needs nothing again, and is skipped. Slots and observed pods are frozen,
# so "the same object" means the same values; a backend that builds new objects for every observation
# simply never skips. tests/unit/controller/test_settled.py checks skipping against not skipping.


def _settled_slots(cycle: Cycle) -> dict[str, tuple[PodStatus, ObservedPod]]:
    memory = cycle.settled
    return memory.of(keys.job_key(cycle.job)) if memory is not None else {}


def _observation(cycle: Cycle, slot: PodStatus, pod: ObservedPod | None) -> Observation:
    if pod is None:
        lost = cycle.node(slot.node)
        return Observation(
            slot.ref, cycle.now, "Deleted", node=slot.node, node_ready=lost is None or lost.ready
        )
    node = cycle.node(pod.node)
    reason = pod.reason
    agent = pod.agent
    if (
        reason is None
        and pod.phase is ObservedPhase.RUNNING
        and agent is not None
        and agent.hung
        and agent.in_place_restarts >= slot.in_place_restarts  # not a restart in place still under way
    ):
        reason = "Hang"
    return Observation(
        pod=slot.ref,
        at=cycle.now,
        phase=_PHASE_WORDS[pod.phase],
        exit_code=pod.exit_code,
        signal=pod.signal,
        reason=reason,
        node=pod.node,
        node_ready=node is None or node.ready,
    )


#: An enum member's ``value`` is a property: looked up once here, not for every pod on every reconcile.
_PHASE_WORDS = {phase: phase.value for phase in ObservedPhase}


def _fault_of(cycle: Cycle, slot: PodStatus, pod: ObservedPod | None) -> Fault | None:
    if pod is None:
        _, error = cycle.launch_attempt(slot)
        if error is not None and not error.transient:  # a launch that waits is launched again, no fault
            fault = classify(Observation(slot.ref, cycle.now, "Failed", reason="StartTimeout"))
            return None if fault is None else replace(fault, message=f"the launch failed: {error.message}")
        if not slot.seen:
            return _start_timeout(cycle, slot)  # launched but not listed yet (eventually consistent)
    fault = classify(_observation(cycle, slot, pod))
    if fault is None and pod is not None and pod.phase is ObservedPhase.PENDING:
        return _start_timeout(cycle, slot)
    return fault


def _start_timeout(cycle: Cycle, slot: PodStatus) -> Fault | None:
    """restartTimeLimit holds for relaunches, not for a job's first start (which waits for scheduling)."""
    if slot.cause != "restart" or slot.launched_at is None:
        return None
    return start_timed_out(cycle.job, slot.ref, slot.launched_at, cycle.now)


def _note(cycle: Cycle, slot: PodStatus, pod: ObservedPod) -> PodStatus:
    """What the pod shows, whatever is decided about it next: seen, its node, started or running."""
    node = pod.node or slot.node
    changes: dict[str, object] = {"seen": True, "node": node}
    if pod.address is not None:
        changes["address"] = pod.address
    if pod.phase is ObservedPhase.PENDING:
        changes["phase"] = PodPhase.CREATING if pod.node else PodPhase.PENDING
    elif pod.phase is ObservedPhase.RUNNING:
        started = pod.started_at if pod.started_at is not None else cycle.now
        if slot.phase is not PodPhase.RUNNING:
            cycle.state = record_running(cycle.state, slot.ref, started)
        changes["phase"] = PodPhase.RUNNING
        changes["running_since"] = slot.running_since if slot.running_since is not None else started
    if (
        slot.seen
        and slot.node == node
        and slot.phase == changes.get("phase", slot.phase)
        and slot.running_since == changes.get("running_since", slot.running_since)
        and slot.address == changes.get("address", slot.address)
    ):
        return slot  # nothing new: most pods of a big job on most reconciles
    return cycle.put(slot, **changes)


def _record_worker_restarts(cycle: Cycle, slot: PodStatus, pod: ObservedPod) -> PodStatus:
    """Restarts of workers that torchrun carried out inside the pod, each recorded once (history, Event).
    Nothing is decided or counted: torchrun already restarted them, on its own budget."""
    agent = pod.agent
    total = agent.worker_restarts_from + len(agent.worker_restarts) if agent is not None else 0
    if agent is None or total <= slot.worker_restarts:
        return slot
    for number, restart in enumerate(agent.worker_restarts, start=agent.worker_restarts_from):
        if number < slot.worker_restarts:
            continue
        fault = Fault(FaultKind.EXITED, slot.ref, restart.at, exit_code=restart.exit_code, node=pod.node)
        decision = torchrun_restarted(
            fault, restart.failed, restart.restarts_left, restart.max_restarts, spare=restart.spare
        )
        cycle.record(_history_entry(cycle, decision))
        cycle.emit(EventType.WARNING, "WorkersRestarted", decision.reason, slot.name)
    return cycle.put(slot, worker_restarts=total)


def _follow(cycle: Cycle, slot: PodStatus, pod: ObservedPod | None, *, decide_faults: bool) -> None:
    """No fault: a pod that finished well, made progress, or runs again after a fault."""
    if pod is None:
        return
    if pod.phase is ObservedPhase.SUCCEEDED:
        if decide_faults:
            act_on(cycle, Fault(FaultKind.EXITED, slot.ref, cycle.now, exit_code=0, node=pod.node), pod)
        else:
            cycle.put(slot, phase=PodPhase.SUCCEEDED, open_faults=())
        return
    if pod.phase is ObservedPhase.RUNNING:
        _note_progress(cycle, slot, pod)
        if slot.open_faults and _recovered(slot, pod):
            recovered_at = slot.running_since if slot.in_place_restarts == 0 else None
            _close_faults(cycle, cycle.slots[slot.name], recovered_at or cycle.now)


def _recovered(slot: PodStatus, pod: ObservedPod) -> bool:
    agent = pod.agent
    if slot.in_place_restarts == 0:
        return True
    return agent is not None and agent.in_place_restarts >= slot.in_place_restarts and not agent.hung


def _note_progress(cycle: Cycle, slot: PodStatus, pod: ObservedPod) -> None:
    """Tell the policy the pod runs healthily: resets hang and backoff streaks as the policy sees fit."""
    agent = pod.agent
    if agent is None or agent.last_progress_at is None:
        return
    if agent.in_place_restarts < slot.in_place_restarts or agent.hung:
        return  # a restart in place still under way, or no progress since: the old run's progress is stale
    at = agent.last_progress_at
    if slot.progress_at is not None and at <= slot.progress_at:
        return
    cycle.state = record_progress(cycle.state, slot.ref, at)
    cycle.put(slot, progress_at=at)


def _record_end(cycle: Cycle, slot: PodStatus, pod: ObservedPod | None) -> None:
    """After the job ended: a pod that stops is only noted, nothing is decided about it."""
    if pod is None or pod.phase in (ObservedPhase.FAILED, ObservedPhase.UNKNOWN):
        cycle.put(slot, phase=PodPhase.FAILED, open_faults=(), message="ended after the job finished")


# ---- acting on a fault --------------------------------------------------------------------------------


def act_on(cycle: Cycle, fault: Fault, pod: ObservedPod | None = None) -> Decision:
    """Decide on a fault, update the counters, record it, and change the slots the decision touches."""
    slot = cycle.slot(fault.pod) if fault.pod is not None else None
    checked = None
    if is_check_fault(cycle, fault):
        decision, checked = decide_check(cycle, fault, pod)
    else:
        decision = decide(
            cycle.job, cycle.state, fault, cycle.now, _alive_besides(cycle, slot), cycle.slot_counts()
        )
        checked = check_of(cycle, fault, pod)
    targets: list[PodStatus] = []
    if slot is not None and decision.action is Remedy.RESTART:
        targets = _scope(cycle, slot, decision.scope)
        decision = replace(decision, pods=tuple(target.ref for target in targets))
    fenced_until = fencing.fenced_until(cycle, targets)
    cycle.state = apply_decision(cycle.state, decision, cycle.now)
    success = fault.kind is FaultKind.EXITED and fault.exit_code == 0
    name = cycle.name_of(fault.pod) if fault.pod is not None else None
    if success and decision.action is Remedy.NONE:
        cycle.emit(EventType.NORMAL, "Succeeded", decision.reason, name)
        if slot is not None:
            cycle.put(slot, phase=PodPhase.SUCCEEDED, open_faults=(), message=decision.reason)
        return decision
    entry = cycle.record(
        _history_entry(cycle, decision).model_copy(update={"check": checked, "fenced_until": fenced_until})
    )
    cycle.emit(EventType.NORMAL if success else EventType.WARNING, fault.kind.value, decision.reason, name)
    if is_check_fault(cycle, fault):
        carry_out_check(cycle, decision, checked)
    if slot is None:
        return decision
    if decision.action is Remedy.RESTART:
        for target in targets:
            fence = fenced_until if fencing.unconfirmed(cycle, target) else None
            _restart(cycle, target, decision, entry, faulted=target.name == slot.name, fenced_until=fence)
    elif decision.action is Remedy.RESTART_IN_PLACE:
        _restart_in_place(cycle, slot, decision, entry)
    elif decision.action is Remedy.SHRINK:
        _shrink(cycle, slot, decision)
    else:
        _fail(cycle, slot, decision)
    return decision


def _alive_besides(cycle: Cycle, slot: PodStatus | None) -> dict[str, int]:
    """role -> pods up or coming up, not counting the faulted one (what decide's minReplicas check needs)."""
    alive = cycle.alive()
    if slot is not None and slot.phase in ALIVE_PHASES:
        alive[slot.role] -= 1
    return alive


def _scope(cycle: Cycle, slot: PodStatus, scope: RestartScope | None) -> list[PodStatus]:
    """The slots a restart touches, from the pods that exist now (a scaled role has more or fewer)."""
    if scope is RestartScope.REPLICA:
        candidates = cycle.role_slots(slot.role)
    elif scope is RestartScope.ALL:
        candidates = list(cycle.ordered_slots())
    else:
        return [slot]
    return [s for s in candidates if s.name == slot.name or s.phase in ALIVE_PHASES]


def _restart(
    cycle: Cycle,
    slot: PodStatus,
    decision: Decision,
    entry: int,
    *,
    faulted: bool,
    fenced_until: float | None = None,
) -> None:
    due = cycle.now + decision.delay_seconds
    if fenced_until is not None:
        due = max(due, fenced_until)
        fencing.say_wait(cycle, slot, fenced_until)
    opened = (*slot.open_faults, entry)
    if slot.phase is PodPhase.WAITING:  # not launched yet: just wait for the later of the two delays
        cycle.put(slot, due_at=max(slot.due_at or due, due), open_faults=opened)
        return
    avoid = (slot.node,) if faulted and decision.replace_node and slot.node else ()
    cycle.put(
        slot,
        phase=PodPhase.WAITING,
        generation=slot.generation + 1,
        restarts=slot.restarts + 1,
        in_place_restarts=0,
        worker_restarts=0,
        due_at=due,
        fenced_until=fenced_until,
        launched_at=None,
        running_since=None,
        progress_at=None,
        seen=False,
        node=None,
        address=None,
        avoid_nodes=avoid,
        open_faults=opened,
        cause="restart",
    )


def _restart_in_place(cycle: Cycle, slot: PodStatus, decision: Decision, entry: int) -> None:
    """A hang restart in place: the same pod runs its command again, nothing is rescheduled, so RESTARTS and
    restartCounts stay as they are; the hang restarts of the pod and of its role go up instead."""
    cycle.put(
        slot,
        in_place_restarts=slot.in_place_restarts + 1,
        hang_restarts=slot.hang_restarts + 1,
        open_faults=(*slot.open_faults, entry),
    )
    counts = dict(cycle.get("hang_restart_counts"))
    counts[slot.role] = counts.get(slot.role, 0) + 1
    cycle.updates["hang_restart_counts"] = counts


def _shrink(cycle: Cycle, slot: PodStatus, decision: Decision) -> None:
    cycle.put(
        slot,
        phase=PodPhase.SHRUNK,
        open_faults=(),
        shrunk_for=decision.fault.kind.value,
        avoid_nodes=(slot.node,) if slot.node else (),
        message=decision.reason,
    )
    cycle.scale_message("scalein", slot.role, [slot.name])


def _fail(cycle: Cycle, slot: PodStatus, decision: Decision) -> None:
    """The pod failed for good (``actuate`` stops it if it still runs; one that ended stays for its logs)."""
    cycle.put(slot, phase=PodPhase.FAILED, open_faults=(), message=decision.reason)


def _close_faults(cycle: Cycle, slot: PodStatus, at: float) -> None:
    """The slot runs again: each fault it was recovering from is over once no other slot still waits on it."""
    cycle.put(slot, open_faults=())
    for seq in slot.open_faults:
        if any(seq in other.open_faults for other in cycle.slots.values()):
            continue
        found = cycle.history_entry(seq)
        if found is not None and found[1].recovered_at is None:
            position, entry = found
            cycle.history[position] = entry.model_copy(
                update={"recovered_at": at, "recovery_seconds": max(at - entry.at, 0.0)}
            )


def _history_entry(cycle: Cycle, decision: Decision) -> HistoryEntry:
    fault = decision.fault
    ref = fault.pod
    state = cycle.state
    counters = {"jobRestarts": state.job_restarts}
    if ref is not None:
        counters["roleRestarts"] = state.role_restarts.get(ref.role, 0)
        counters["podRestarts"] = state.pod(ref).restarts
        counters["consecutiveHangs"] = state.pod(ref).consecutive_hangs
    if cycle.job.spec.job_retry is not None:
        counters["jobRetries"] = state.job_retries
    return HistoryEntry(
        at=fault.at,
        kind=HistoryKind.FAULT,
        role=ref.role if ref is not None else None,
        pod=cycle.name_of(ref) if ref is not None else None,
        node=fault.node,
        address=_address(cycle, ref),
        fault=fault.kind,
        exit_code=fault.exit_code,
        rule=decision.rule,
        action=decision.action,
        scope=decision.scope.value if decision.scope is not None else None,
        counted=decision.counted,
        reason=decision.reason,
        counters=counters,
    )


def _address(cycle: Cycle, ref: PodRef | None) -> str | None:
    """The address of the incarnation a fault is about, as last seen (before a relaunch forgets it)."""
    if ref is None:
        return None
    slot = cycle.slots.get(cycle.name_of(ref))
    return slot.address if slot is not None else None
