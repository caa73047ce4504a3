"""The job's phase as its pods show it, and the conditions list as CCE's operator writes it.

One condition per phase type, the current one ``"True"`` and the others ``"False"``; entering a phase again
moves its condition to the end with fresh times (as Kubeflow does), so the list reads oldest to newest.
Reasons are ``TrainingJob<Phase>``; messages are CCE's: "all pods are waiting for scheduling",
"pods [...] creating containers", "all pods are running", and the Scaling operation.
"""

from __future__ import annotations

from trainguard.controller.agentless import agent_condition
from trainguard.controller.cycle import Cycle
from trainguard.controller.phases import ALIVE_PHASES, LEFT_OUT_PHASES, JobPhase, PodPhase
from trainguard.controller.status import Condition


def settle_phase(cycle: Cycle) -> None:
    """The phase of a job that goes on, from its slots: Restarting while a fault is being recovered from,
    Scaling while a scale step is under way (pods of the step still starting or still
    being removed), else Pending, Creating or Running."""
    if cycle.phase.is_terminal or cycle.phase is JobPhase.SUSPENDED:
        return
    # One walk over the alive slots (thousands in a big job): those recovering, those not running yet, and
    # of these the ones a scale step started, and whether any is up (creating or running).
    active = up = False
    recovering: list[str] = []
    starting: list[str] = []
    scaling: list[str] = []
    for s in cycle.ordered_slots():
        if s.phase not in ALIVE_PHASES:
            continue
        active = True
        if s.open_faults:
            recovering.append(s.name)
        if s.phase is PodPhase.RUNNING:
            up = True
            continue
        up = up or s.phase is PodPhase.CREATING
        starting.append(s.name)
        if s.cause in ("scale", "grow"):
            scaling.append(s.name)
    # Pods being removed by a scale-in or a shrink: what the cluster still shows, not what this cycle did,
    # so that reconciling the same observation again gives the same phase.
    leaving = any(
        s.phase in LEFT_OUT_PHASES
        and any(pod.generation == s.generation for pod in cycle.observed_pods(s.name))
        for s in cycle.slots.values()
    )
    if recovering:
        cycle.phase_to(
            JobPhase.RESTARTING, "TrainingJobRestarting", f"pods [{' '.join(recovering)}] restarting"
        )
    elif scaling or leaving:
        cycle.phase_to(JobPhase.SCALING, "TrainingJobScaling", cycle.get("scaling_message") or "scaling")
    elif not active:
        return  # every pod has ended; the outcome decides what the job is
    elif not starting:
        cycle.phase_to(JobPhase.RUNNING, "TrainingJobRunning", "all pods are running")
    elif not up:
        cycle.phase_to(JobPhase.PENDING, "TrainingJobPending", "all pods are waiting for scheduling")
    else:
        names = " ".join(starting)
        cycle.phase_to(JobPhase.CREATING, "TrainingJobCreating", f"pods [{names}] creating containers")


def next_conditions(cycle: Cycle) -> tuple[Condition, ...]:
    """The conditions after this cycle: the phases' (unchanged unless the phase or its words changed), then
    ``AgentUnavailable`` where pods run without the agent."""
    agent = agent_condition(cycle)
    return (*_phase_conditions(cycle), *((agent,) if agent is not None else ()))


def _phase_conditions(cycle: Cycle) -> tuple[Condition, ...]:
    conditions = [c for c in cycle.before.conditions if isinstance(c.type, JobPhase)]
    if cycle.phase_words is None:
        return tuple(conditions)
    reason, message = cycle.phase_words
    current = conditions[-1] if conditions else None
    entered = bool(cycle.transitions)
    if not entered and current is not None and current.type is cycle.phase:
        if (current.reason, current.message) == (reason, message):
            return tuple(conditions)
        conditions[-1] = current.model_copy(
            update={"reason": reason, "message": message, "last_probe_time": cycle.now}
        )
        return tuple(conditions)
    kept = [c.model_copy(update={"status": "False"}) for c in conditions if c.type is not cycle.phase]
    fresh = Condition(
        type=cycle.phase,
        status="True",
        reason=reason,
        message=message,
        last_transition_time=cycle.now,
        last_probe_time=cycle.now,
    )
    return (*kept, fresh)
