"""trainguard.controller: the reconcile loop, the job and pod-slot state machines, conditions, events, the
fault-recovery history and elastic scaling. Pure like the policy: time and observations come in, a new
status and actions go out; a backend (``Backend``) observes and carries the actions out."""

from trainguard.controller.backend import (
    Action,
    ActionError,
    Applied,
    Backend,
    EmitEvent,
    EventType,
    IsolateNode,
    IsolationMode,
    LaunchPod,
    NotYet,
    NudgeSurvivors,
    Observed,
    ObservedNode,
    ObservedPhase,
    ObservedPod,
    ReleaseMode,
    ReleaseSurvivors,
    RestartInPlace,
    ScaleRequest,
    StatusConflict,
    TerminatePod,
    UpdateDiscovery,
    WriteStatus,
)
from trainguard.controller.loop import step
from trainguard.controller.phases import JOB_TRANSITIONS, POD_TRANSITIONS, JobPhase, PodPhase
from trainguard.controller.reconcile import ReconcileResult, reconcile
from trainguard.controller.reports import AgentReport, LiveRound, WorkerRestart
from trainguard.controller.settled import SettledSlots
from trainguard.controller.status import Condition, HistoryEntry, JobStatus, PhaseTransition, PodStatus

__all__ = [
    "JOB_TRANSITIONS",
    "POD_TRANSITIONS",
    "Action",
    "ActionError",
    "AgentReport",
    "Applied",
    "Backend",
    "Condition",
    "EmitEvent",
    "EventType",
    "HistoryEntry",
    "IsolateNode",
    "IsolationMode",
    "JobPhase",
    "JobStatus",
    "LaunchPod",
    "LiveRound",
    "NotYet",
    "NudgeSurvivors",
    "Observed",
    "ObservedNode",
    "ObservedPhase",
    "ObservedPod",
    "PhaseTransition",
    "PodPhase",
    "PodStatus",
    "ReconcileResult",
    "ReleaseMode",
    "ReleaseSurvivors",
    "RestartInPlace",
    "ScaleRequest",
    "SettledSlots",
    "StatusConflict",
    "TerminatePod",
    "UpdateDiscovery",
    "WorkerRestart",
    "WriteStatus",
    "reconcile",
    "step",
]
