"""Reading pods and nodes as the controller sees them (``ObservedPod``, ``ObservedNode``).

Faults come from the objects' real signals: a container's ``terminated`` state (exit code, and the reason,
``OOMKilled`` among them); a pod's ``Evicted`` status reason, or its ``DisruptionTarget`` condition
(eviction through the API, preemption); a node whose ``Ready`` condition is not True, or that carries the
``not-ready``/``unreachable`` taints; the agent's final report in the termination message (a hang it gave
up on, a failed fault tolerance check). A pod that disappears without the operator asking is simply no longer
listed, which the controller reads as PodForceDeleted. What happened inside a pod that goes on (hangs restarted
in place, workers restarted by torchrun) is the agent's summary in the pod's ``trainguard.io/agent-report``
annotation (``trainguard.backends.k8s.agentreports``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from trainguard.backends.k8s.delivery import PROBE_CONTAINER
from trainguard.backends.k8s.manifests import ANNOTATION_AGENT_REPORT, ANNOTATION_IN_PLACE
from trainguard.backends.k8s.metadata import LABEL_COMPONENT, LABEL_GENERATION, LABEL_INDEX, LABEL_ROLE
from trainguard.controller.backend import ObservedPhase, ObservedPod
from trainguard.controller.reports import AgentReport
from trainguard.pod import checks, contract
from trainguard.pod import summary as summaries

Obj = dict[str, Any]

NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
#: DisruptionTarget reasons that are about the node, not the pod: the node's readiness tells those.
_NODE_DISRUPTIONS = frozenset({"DeletionByTaintManager"})
_PREEMPTIONS = frozenset({"PreemptionByScheduler", "PreemptionByKubeScheduler"})


def parse_time(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def is_ours(pod: Obj) -> bool:
    """A replica of a job: the controller's to observe. The rendezvous store's pod (a component) is not one."""
    labels = pod.get("metadata", {}).get("labels") or {}
    if LABEL_COMPONENT in labels:
        return False
    return all(key in labels for key in (LABEL_ROLE, LABEL_INDEX, LABEL_GENERATION))


def observed_pod(pod: Obj) -> ObservedPod:
    meta, status = pod["metadata"], pod.get("status") or {}
    labels = meta.get("labels") or {}
    phase = _phase(status.get("phase"))
    terminated, running = _container_state(status)
    exit_code = terminated.get("exitCode") if terminated else None
    if phase is ObservedPhase.FAILED and exit_code == 0 and not status.get("reason"):
        phase = ObservedPhase.SUCCEEDED  # the training container succeeded (a side container may not have)
    reason = _reason(status, terminated)
    started = parse_time(running.get("startedAt")) if running else None
    annotations = meta.get("annotations") or {}
    summary = summaries.parse(_json_message(annotations.get(ANNOTATION_AGENT_REPORT)))
    agent = _agent(annotations, summary)
    return ObservedPod(
        name=meta["name"],
        role=labels[LABEL_ROLE],
        index=int(labels[LABEL_INDEX]),
        generation=int(labels[LABEL_GENERATION]),
        phase=phase,
        node=(pod.get("spec") or {}).get("nodeName") or None,
        exit_code=int(exit_code) if isinstance(exit_code, int) else None,
        reason=reason,
        started_at=started,
        terminating=bool(meta.get("deletionTimestamp")),
        agent=agent,
        agent_missing=_agent_missing(status, terminated, summary),
        address=status.get("podIP") or None,
        ready=pod_ready(status),
    )


def pod_ready(status: Obj) -> bool:
    """The Ready condition of a pod's ``status``; a pod without one (not started yet, or a status that does not tell) counts
    as ready: only a Ready condition that says False holds anything back."""
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return ready is None or ready.get("status") == "True"


def _agent(annotations: dict[str, str], summary: dict[str, Any] | None) -> AgentReport | None:
    """What the agent said (its ``summary``, as the operator took it), with the restarts in place the
    controller has answered (``AgentReport.from_summary``). Before any summary, the answered restarts are all
    there is."""
    text = annotations.get(ANNOTATION_IN_PLACE)
    answered = int(text) if text and text.isdigit() else 0
    if summary is None:
        return AgentReport(in_place_restarts=answered) if answered else None
    return AgentReport.from_summary(summary, answered)


def _agent_missing(status: Obj, terminated: Obj | None, summary: dict[str, Any] | None) -> str | None:
    """Why the agent cannot run in this pod's image (no python3 it can use), or None: as ``trainguard-entry``
    told the operator when the container started (``agentMissing`` of the pod's summary); else as the entry
    left it in the training container's termination message (its probe's JSON), once the container ended
    without a message of its own; else, in a pod an older operator made, as its probe init container's
    termination message said it."""
    if summary is not None and summary.get("agentMissing"):
        return str(summary["agentMissing"])
    messages = [(terminated or {}).get("message")]
    for container in status.get("initContainerStatuses") or []:
        if container.get("name") == PROBE_CONTAINER:
            messages.append(((container.get("state") or {}).get("terminated") or {}).get("message"))
    for message in messages:
        probe = _json_message(message)
        if probe is not None and probe.get("usable") is False:
            return str(probe.get("reason") or "the image has no python3 the agent can run with")
    return None


def _phase(value: Any) -> ObservedPhase:
    try:
        return ObservedPhase(value)
    except ValueError:
        return ObservedPhase.PENDING


def _container_state(status: Obj) -> tuple[Obj | None, Obj | None]:
    """The first container's terminated and running states (the training container is the first)."""
    containers = status.get("containerStatuses") or []
    state = (containers[0].get("state") or {}) if containers else {}
    return state.get("terminated"), state.get("running")


def _reason(status: Obj, terminated: Obj | None) -> str | None:
    if status.get("reason") in ("Evicted", "Preempting"):
        return "Evicted" if status["reason"] == "Evicted" else "Preempted"
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            why = condition.get("reason")
            if why in _NODE_DISRUPTIONS:
                continue
            return "Preempted" if why in _PREEMPTIONS else "DisruptionTarget"
    if terminated and terminated.get("reason") == "OOMKilled":
        return "OOMKilled"
    if terminated:
        return _agents_reason(terminated.get("message"))
    return None


#: The agent's final reports that carry a reason of its own, and those reasons.
_AGENT_REASONS = {
    contract.REPORT_GAVE_UP: frozenset({contract.REASON_HANG}),
    contract.REPORT_EXITED: frozenset({checks.REASON_HARDWARE, checks.REASON_PRE_CHECK}),
}


def _agents_reason(message: object) -> str | None:
    """The reason the agent's final report (the termination message) gives: it gave up on a hang (Hang), or
    its fault tolerance check ended the pod (HardwareFault, PreCheckFailed)."""
    report = _json_message(message)
    if report is None:
        return None
    reason = report.get("reason")
    return reason if reason in _AGENT_REASONS.get(str(report.get("event")), ()) else None


def _json_message(message: object) -> dict[str, Any] | None:
    """A termination message that is a JSON object (what the agent and the entry's probe write), else None."""
    if not isinstance(message, str) or not message.startswith("{"):
        return None
    try:
        value = json.loads(message)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def node_ready(node: Obj) -> bool:
    spec, status = node.get("spec") or {}, node.get("status") or {}
    if any(taint.get("key") in NOT_READY_TAINTS for taint in spec.get("taints") or []):
        return False
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return ready is not None and ready.get("status") == "True"
