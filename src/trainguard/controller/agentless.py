"""Pods whose image cannot run the agent (no python3 >= 3.8 in it): the backend runs their command as written,
and the controller says so, once per incarnation in a Warning Event and, while any such pod is there, in the
``AgentUnavailable`` condition. What such a pod lacks: hang detection and restart in place (both are the
agent's), and the agent's final report (its exit is read from the container as it is)."""

from __future__ import annotations

from trainguard.controller import keys
from trainguard.controller.backend import EmitEvent, EventType
from trainguard.controller.cycle import Cycle
from trainguard.controller.status import AGENT_UNAVAILABLE, Condition

REASON = "AgentUnavailable"
#: What a pod without the agent goes without.
WITHOUT = "its command runs as written, without trainguard's agent: no hang detection, no restart in place"


def warn_pods_without_agent(cycle: Cycle) -> None:
    """One Warning Event per incarnation of a pod whose image cannot run the agent."""
    for pod in cycle.observed.pods:
        if pod.agent_missing is None:
            continue
        message = f"pod {pod.name}: {pod.agent_missing}; {WITHOUT}"
        key = keys.agent_missing(cycle.job, pod.name, pod.generation)
        cycle.issue(EmitEvent(key, EventType.WARNING, REASON, message, cycle.now, pod.name))


def agent_condition(cycle: Cycle) -> Condition | None:
    """``AgentUnavailable``: True (naming the pods and why) while the job goes on with pods that run without
    the agent, False once none is left; absent for a job that never had one. Kept as it was once the job
    ended."""
    before = next((c for c in cycle.before.conditions if c.type == AGENT_UNAVAILABLE), None)
    if cycle.phase.is_terminal:
        return before
    missing = sorted((pod.name, pod.agent_missing) for pod in cycle.observed.pods if pod.agent_missing)
    if not missing:
        if before is None or before.status == "False":
            return before
        return before.model_copy(
            update={
                "status": "False",
                "message": "every pod runs under trainguard's agent",
                "last_transition_time": cycle.now,
                "last_probe_time": cycle.now,
            }
        )
    names = " ".join(name for name, _ in missing)
    message = f"pods [{names}]: {missing[0][1]}; {WITHOUT}"
    if before is not None and before.status == "True" and before.message == message:
        return before
    since = before.last_transition_time if before is not None and before.status == "True" else cycle.now
    return Condition(
        type=AGENT_UNAVAILABLE,
        status="True",
        reason=REASON,
        message=message,
        last_transition_time=since,
        last_probe_time=cycle.now,
    )
