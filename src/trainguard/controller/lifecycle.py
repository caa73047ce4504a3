"""Moving pod slots through their lives: launching due slots, suspending and resuming, and ending the job
(``cleanPodPolicy``). These steps only change the status; ``actuate`` turns it into actions."""

from __future__ import annotations

from trainguard.api import CleanPodPolicy
from trainguard.controller.cycle import Cycle
from trainguard.controller.phases import JobPhase, PodPhase


def launch_due(cycle: Cycle) -> None:
    """Mark every waiting slot whose time has come as launched, once its previous incarnation is gone (and,
    where it was removed from a node that is not Ready, once its agent has ended it: ``fenced_until``)."""
    for slot in list(cycle.ordered_slots()):
        if slot.phase is not PodPhase.WAITING or (slot.due_at is not None and slot.due_at > cycle.now):
            continue
        if cycle.observed_pods(slot.name):
            continue  # the previous incarnation is still being removed; names are unique on a cluster
        if slot.fenced_until is not None and slot.fenced_until > cycle.now:
            continue  # fencing: a previous incarnation may still run on a node that is not Ready
        cycle.put(slot, phase=PodPhase.PENDING, due_at=None, launched_at=cycle.now, seen=False)


def suspend(cycle: Cycle) -> None:
    """Stop every pod; each comes back as a new incarnation when the job resumes (not a restart)."""
    for slot in list(cycle.ordered_slots()):
        if not slot.phase.is_launched:
            continue
        cycle.put(
            slot,
            phase=PodPhase.WAITING,
            generation=slot.generation + 1,
            due_at=cycle.now,
            launched_at=None,
            running_since=None,
            seen=False,
            node=None,
            address=None,
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


def end_pods(cycle: Cycle) -> None:
    """After the job ended nothing waiting is launched, and by cleanPodPolicy (All, Running, None) the pods
    that still run are removed; a job that ran out of time stops them whatever the policy says. Finished pods
    keep their phase (``actuate`` removes them too under All)."""
    policy = cycle.job.spec.clean_pod_policy
    stop = policy is not CleanPodPolicy.NONE or cycle.phase is JobPhase.TIMEOUT
    for slot in list(cycle.ordered_slots()):
        if slot.phase is PodPhase.WAITING or (stop and slot.phase.is_launched):
            message = f"removed: the job ended (cleanPodPolicy {policy.value})"
            cycle.put(slot, phase=PodPhase.REMOVED, due_at=None, open_faults=(), message=message)
