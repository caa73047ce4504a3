"""``reconcile``: one level-triggered step of a job toward what its spec and policies ask for.

    observed = backend.observe(job)
    result = reconcile(job, status, observed, now)
    backend.apply(job, result.actions)        # in order: decisions stored, actions, issued keys stored
    ... call again by ``result.wake_at`` at the latest, or sooner when something changes

It is a pure function of the job, the stored status, the observation and the time: it reads no clock and
performs no I/O. Reconciling the same observation again from the status it returned issues no new action;
reconciling it again from the *previous* status (a controller that crashed before storing) issues the same
actions under the same keys, which the backend ignores.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.api import TrainingJob
from trainguard.controller import keys
from trainguard.controller.actuate import actuate, unseen_until
from trainguard.controller.agentless import warn_pods_without_agent
from trainguard.controller.backend import Action, EmitEvent, LaunchPod, Observed, WriteStatus
from trainguard.controller.conditions import next_conditions, settle_phase
from trainguard.controller.cycle import Cycle
from trainguard.controller.faultcheck import record_checks, reissue_deadlines, reissue_wake_at
from trainguard.controller.faults import act_on, observe_pods
from trainguard.controller.incarnations import vanished
from trainguard.controller.lifecycle import end_pods, launch_due, resume, suspend
from trainguard.controller.live import record_live_rounds
from trainguard.controller.nudges import nudge_survivors
from trainguard.controller.phases import LEFT_OUT_PHASES, JobPhase, PodPhase
from trainguard.controller.release import release_survivors
from trainguard.controller.scaling import (
    discovery_held_until,
    grow_back,
    reach_desired,
    scale_deadline,
    take_scale_requests,
    time_out_scale_steps,
    update_discovery,
)
from trainguard.controller.settled import SettledSlots
from trainguard.controller.spares import record_spares
from trainguard.controller.status import MAX_HISTORY, MAX_TRANSITIONS, JobStatus, PodStatus, saved_policy
from trainguard.controller.stragglers import record_stragglers
from trainguard.controller.suspicion import record_suspicions
from trainguard.policy import Outcome, check_deadline, outcome

_ENDS = {
    Outcome.SUCCEEDED: JobPhase.SUCCEEDED,
    Outcome.FAILED: JobPhase.FAILED,
    Outcome.TIMEOUT: JobPhase.TIMEOUT,
}


@dataclass(frozen=True)
class ReconcileResult:
    status: JobStatus
    #: To apply in this order: the decisions' WriteStatus (if any), the actions, the final WriteStatus.
    actions: tuple[Action, ...]
    #: Reconcile again by this time even if nothing changes (a backoff ends, a deadline passes), or None.
    wake_at: float | None


def reconcile(
    job: TrainingJob,
    status: JobStatus,
    observed: Observed,
    now: float,
    settled: SettledSlots | None = None,
) -> ReconcileResult:
    """``settled``: the caller's memory of slots found settled before (``faults.SettledSlots``), which lets a
    reconcile of a big job skip the pods that have not changed; the result is the same without it."""
    cycle = Cycle.start(job, status, observed, now, settled)
    if status.started_at is None:
        _begin(cycle)
    if cycle.phase.is_terminal:
        observe_pods(cycle, decide_faults=False)
        end_pods(cycle)
    elif job.spec.suspend:
        suspend(cycle)
    else:
        if cycle.phase is JobPhase.SUSPENDED:
            resume(cycle)
        _run(cycle)
        warn_pods_without_agent(cycle)
    record_live_rounds(cycle)
    actuate(cycle)
    release_survivors(cycle)
    nudge_at = nudge_survivors(cycle)
    update_discovery(cycle)
    settle_phase(cycle)
    return _finish(cycle, nudge_at)


def _begin(cycle: Cycle) -> None:
    cycle.updates["started_at"] = cycle.now
    cycle.desired.update({role: spec.replicas for role, spec in cycle.job.spec.replica_specs.items()})
    reach_desired(cycle, cause="start")
    cycle.phase_to(JobPhase.PENDING, "TrainingJobPending", "all pods are waiting for scheduling")


def _run(cycle: Cycle) -> None:
    take_scale_requests(cycle)
    reach_desired(cycle, cause="scale")
    observe_pods(cycle)
    time_out_scale_steps(cycle)
    record_checks(cycle)
    record_stragglers(cycle)
    record_suspicions(cycle)
    record_spares(cycle)
    reissue_deadlines(cycle)
    deadline = check_deadline(cycle.job, cycle.get("started_at"), cycle.now)
    if deadline is not None:
        act_on(cycle, deadline)
    judged = outcome(cycle.job, cycle.state, cycle.slot_counts())
    if judged.result is not None:
        cycle.updates.update(completed_at=cycle.now, reason=judged.result.value, message=judged.reason)
        cycle.phase_to(_ENDS[judged.result], f"TrainingJob{judged.result.value}", judged.reason)
        end_pods(cycle)
        return
    grow_back(cycle)
    launch_due(cycle)


def _wake_at(cycle: Cycle, nudge_at: float | None) -> float | None:
    if cycle.phase.is_terminal or cycle.phase is JobPhase.SUSPENDED:
        return None
    times: list[float] = [] if nudge_at is None else [nudge_at]
    specs = cycle.job.spec.replica_specs
    for slot in cycle.slots.values():
        phase = slot.phase
        scaled_until = scale_deadline(cycle, slot)
        if scaled_until is not None:
            times.append(scaled_until)
        if phase is PodPhase.WAITING:
            if slot.due_at is not None and slot.due_at > cycle.now:
                times.append(slot.due_at)
            if slot.fenced_until is not None and slot.fenced_until > cycle.now:
                times.append(slot.fenced_until)
            continue
        if phase is PodPhase.PENDING and not slot.seen:
            relaunch_at = unseen_until(cycle, slot)  # a launch never listed is launched again then
            if relaunch_at is not None and relaunch_at > cycle.now:
                times.append(relaunch_at)
        if slot.cause == "restart" and phase in (PodPhase.PENDING, PodPhase.CREATING):
            spec = specs.get(slot.role)
            limit = spec.restart_time_limit if spec is not None else None
            if limit:
                times.append((slot.launched_at or cycle.now) + limit)
    reissue_at = reissue_wake_at(cycle)
    if reissue_at is not None:
        times.append(reissue_at)
    held_until = discovery_held_until(cycle)
    if held_until is not None:
        times.append(held_until)
    started, limit = cycle.get("started_at"), cycle.job.spec.time_limit
    if started is not None and limit is not None:
        times.append(started + limit)
    return min(times, default=None)


def _stored_after(cycle: Cycle) -> bool:
    """Whether this cycle's decision may be stored once, after its actions (``_finish``): its actions are events
    and launches that a controller which crashed before the write would decide again from the stored status
    (see ``_decided`` and ``_replaces_vanished``), events alone included."""
    stored = {slot.name: slot for slot in cycle.before.pods}
    return all(
        isinstance(action, EmitEvent)
        or (
            isinstance(action, LaunchPod)
            and (_decided(action, stored) or _replaces_vanished(cycle, action, stored))
        )
        for action in cycle.actions
    )


def _decided(launch: LaunchPod, stored: dict[str, PodStatus]) -> bool:
    """A launch that follows from the stored status and the spec alone: of a pod the status does not have yet (a
    new job's, a scale-out's), or of the incarnation the status already holds for its pod (a restart decided and
    stored before, whose pod is launched once the previous one is gone)."""
    slot = stored.get(launch.pod)
    return slot is None or slot.generation == launch.generation


def _replaces_vanished(cycle: Cycle, launch: LaunchPod, stored: dict[str, PodStatus]) -> bool:
    """A launch of the next incarnation of a pod that the stored status saw launched and that is gone (deleted
    under the job, a force-deletion): a controller that crashed before the write finds the stored incarnation
    gone again, and the next one there; it decides the same fault about the vanished one, and launches the next
    under the same key, which the backend finds there (``incarnations.adopt`` leaves such a slot to that
    decision)."""
    slot = stored.get(launch.pod)
    return (
        slot is not None
        and launch.generation == slot.generation + 1
        and vanished(slot, cycle.observed_pods(slot.name))
    )


def _finish(cycle: Cycle, nudge_at: float | None) -> ReconcileResult:
    """The next status, and the actions with the status writes around them.

    When this cycle decided something and acts on it, the decision is stored *before* the actions
    (with the keys issued so far), and the keys of the actions *after* them: a controller that crashes
    in between finds its decisions, and issues again whatever it had not yet recorded as issued. Events
    alone change nothing the controller observes: a batch of only events is stored once, after them (a
    controller that crashes before that write decides the same from the same status and observation, and
    sends the same events under the same keys, which the backend ignores). So is a decision whose only actions
    are launches that follow from the stored status and what is observed, and their events (``_stored_after``):
    a new job's, a scale-out's, the launch of a restart stored before, and the replacement of a pod that
    vanished (its fault counted once: a controller that crashes before the write finds the pod still gone and
    decides the same). A controller that crashes before the write decides them again, and launches the same pods
    under the same keys, which the backend finds there. That saves those launches a status write and its round
    trip before their pods; a decision that removes a pod, or counts a fault whose pod is still there (its exit
    code, its node), is stored first.
    """
    before = cycle.before
    slots = tuple(cycle.ordered_slots())
    counts = cycle.state.role_restarts
    hangs = cycle.get("hang_restart_counts")
    members = dict.fromkeys(cycle.job.spec.replica_specs, 0)
    for slot in slots:
        if slot.phase not in LEFT_OUT_PHASES:
            members[slot.role] += 1
    decided = before.model_copy(
        update={
            **cycle.updates,
            "phase": cycle.phase,
            "conditions": next_conditions(cycle),
            "transitions": (*before.transitions, *cycle.transitions)[-MAX_TRANSITIONS:],
            "restart_counts": {role: counts.get(role, 0) for role in cycle.job.spec.replica_specs},
            "hang_restart_counts": {role: hangs.get(role, 0) for role in cycle.job.spec.replica_specs},
            "replicas": members,
            "desired": dict(cycle.desired),
            "pods": slots,
            "history": tuple(cycle.history[-MAX_HISTORY:]),
            "policy_state": before.policy_state
            if cycle.state is cycle.initial_state
            else saved_policy(cycle.state, cycle.codec),
            "event_seq": cycle.event_seq,
        }
    )
    actions: list[Action] = []
    stored = before
    if decided != before and not _stored_after(cycle):
        stored = decided.model_copy(update={"revision": before.revision + 1})
        actions.append(WriteStatus(keys.status(cycle.job, stored.revision), stored))
    actions.extend(cycle.actions)
    final = decided.model_copy(update={"issued_keys": cycle.issued_keys(), "revision": stored.revision})
    if final != stored:
        final = final.model_copy(update={"revision": stored.revision + 1})
        actions.append(WriteStatus(keys.status(cycle.job, final.revision), final))
    return ReconcileResult(final, tuple(actions), _wake_at(cycle, nudge_at))
