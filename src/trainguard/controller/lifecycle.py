"""Starting and stopping pods: launching due slots, removing replaced incarnations, suspending and resuming,
and cleaning up after the job ends (``cleanPodPolicy``)."""

from __future__ import annotations

from trainguard.api import CleanPodPolicy
from trainguard.controller import keys
from trainguard.controller.backend import EventType, LaunchPod, ObservedPhase, ObservedPod
from trainguard.controller.cycle import Cycle
from trainguard.controller.phases import JobPhase, PodPhase


def launch_due(cycle: Cycle) -> None:
    """Launch every waiting slot whose time has come, once its previous incarnation is gone."""
    for slot in list(cycle.ordered_slots()):
        if slot.phase is not PodPhase.WAITING or (slot.due_at is not None and slot.due_at > cycle.now):
            continue
        if cycle.observed_pods(slot.name):
            continue  # the previous incarnation is still being removed; names are unique on a cluster
        key = keys.launch(cycle.job, slot.name, slot.generation, 0)
        reason = {"restart": "restart", "scale": "scale out", "grow": "grow back"}.get(slot.cause, "start")
        action = LaunchPod(
            key=key,
            pod=slot.name,
            role=slot.role,
            index=slot.index,
            generation=slot.generation,
            restart_count=slot.restarts,
            reason=reason,
            avoid_nodes=slot.avoid_nodes,
        )
        if cycle.issue(action):
            cycle.emit(
                EventType.NORMAL, "SuccessfulCreatePod", f"created pod {slot.name} ({reason})", slot.name
            )
        cycle.put(slot, phase=PodPhase.PENDING, due_at=None, launched_at=cycle.now, seen=False)


def sweep(cycle: Cycle) -> None:
    """Remove pods nobody wants: replaced incarnations, pods of slots that are waiting, shrunk or scaled in,
    and pods the job does not know (an index scaled away while the controller was down)."""
    for pod in cycle.observed.pods:
        slot = cycle.slots.get(pod.name)
        if slot is None or pod.generation < slot.generation:
            cycle.terminate(pod.name, pod.generation, "replaced by a newer incarnation", _force(cycle, pod))
        elif pod.generation == slot.generation and slot.phase in (
            PodPhase.WAITING,
            PodPhase.SHRUNK,
            PodPhase.REMOVED,
        ):
            cycle.terminate(pod.name, pod.generation, f"pod slot is {slot.phase.value}", _force(cycle, pod))


def _force(cycle: Cycle, pod: ObservedPod) -> bool:
    node = cycle.node(pod.node)
    return node is not None and not node.ready


def suspend(cycle: Cycle) -> None:
    """Stop every pod; each comes back as a new incarnation when the job resumes (not a restart)."""
    for slot in list(cycle.ordered_slots()):
        if not slot.phase.is_launched:
            continue
        cycle.terminate(slot.name, slot.generation, "the job is suspended")
        cycle.put(
            slot,
            phase=PodPhase.WAITING,
            generation=slot.generation + 1,
            due_at=cycle.now,
            launched_at=None,
            running_since=None,
            seen=False,
            node=None,
            in_place_restarts=0,
            cause="resume",
        )
    cycle.phase_to(JobPhase.SUSPENDED, "TrainingJobSuspended", "the job is suspended")


def resume(cycle: Cycle) -> None:
    """Start again from the beginning: a resumed job's deadline counts from now (as for a Kubernetes Job)."""
    cycle.updates["started_at"] = cycle.now
    cycle.phase_to(
        JobPhase.PENDING, "TrainingJobResumed", "the job resumed; all pods are waiting for scheduling"
    )


def clean_up(cycle: Cycle) -> None:
    """After the job ended: remove pods by cleanPodPolicy (All, Running, None); a job that ran out of time
    stops its running pods whatever the policy says. Nothing waiting is launched any more."""
    policy = cycle.job.spec.clean_pod_policy
    timed_out = cycle.phase is JobPhase.TIMEOUT
    for waiting in list(cycle.ordered_slots()):
        if waiting.phase is PodPhase.WAITING:
            cycle.put(waiting, phase=PodPhase.REMOVED, due_at=None, open_faults=(), message="the job ended")
    for pod in cycle.observed.pods:
        slot = cycle.slots.get(pod.name)
        current = slot is not None and pod.generation == slot.generation
        ended = pod.phase in (ObservedPhase.SUCCEEDED, ObservedPhase.FAILED)
        if policy is CleanPodPolicy.ALL or (not ended and (policy is CleanPodPolicy.RUNNING or timed_out)):
            reason = f"the job ended (cleanPodPolicy {policy.value})"
            cycle.terminate(pod.name, pod.generation, reason, _force(cycle, pod))
            if current and slot is not None and slot.phase.is_launched:
                cycle.put(slot, phase=PodPhase.REMOVED, open_faults=(), message="removed after the job ended")
