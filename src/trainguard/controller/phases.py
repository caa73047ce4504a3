"""The job's and the pod slots' state machines: each phase, and where it may go next.

Job::

    Pending ─► Creating ─► Running ⇄ Restarting | Scaling
       │           │          │
       └───────────┴──────────┴─► Succeeded | Failed | Timeout      (terminal: no way out)
    any alive phase ⇄ Suspended   (resuming goes back to Pending)

A pod slot (one ``<job>-<role>-<index>``) lives through incarnations: each relaunch is a new generation of
the same slot, so the pod keeps its name and index::

    Waiting ─► Pending ─► Creating ─► Running ─► Succeeded
       ▲          │           │          │
       └──────────┴───────────┴──────────┴─► Waiting (restart) | Failed | Shrunk | Removed
    Shrunk ─► Waiting (grow back) | Removed    Succeeded, Failed ─► Removed (scale-in)    Removed: terminal
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum


class JobPhase(str, Enum):
    PENDING = "Pending"
    CREATING = "Creating"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SCALING = "Scaling"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    TIMEOUT = "Timeout"

    @property
    def is_terminal(self) -> bool:
        return not JOB_TRANSITIONS[self]


_LIVE = frozenset(
    {JobPhase.PENDING, JobPhase.CREATING, JobPhase.RUNNING, JobPhase.RESTARTING, JobPhase.SCALING}
)
_ENDS = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.TIMEOUT})

#: Where each phase may go. A phase is terminal exactly when it has no exits.
JOB_TRANSITIONS: Mapping[JobPhase, frozenset[JobPhase]] = {
    **{phase: (_LIVE | _ENDS | {JobPhase.SUSPENDED}) - {phase} for phase in _LIVE},
    # A suspended job has no pods: it can only resume (from the start) or be given up.
    JobPhase.SUSPENDED: frozenset({JobPhase.PENDING, JobPhase.FAILED, JobPhase.TIMEOUT}),
    JobPhase.SUCCEEDED: frozenset(),
    JobPhase.FAILED: frozenset(),
    JobPhase.TIMEOUT: frozenset(),
}


class PodPhase(str, Enum):
    """One pod slot, as the controller tracks it (not the Kubernetes pod phase)."""

    WAITING = "Waiting"  # a (re)launch is scheduled for ``due_at``
    PENDING = "Pending"  # launched, not on a node yet
    CREATING = "Creating"  # on a node, containers starting
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"  # permanently failed: policy said no, or a limit was spent
    SHRUNK = "Shrunk"  # left out by an elastic shrink; may grow back when capacity returns
    REMOVED = "Removed"  # scaled in

    @property
    def is_terminal(self) -> bool:
        return not POD_TRANSITIONS[self]

    @property
    def is_launched(self) -> bool:
        """Whether an incarnation of the slot is supposed to exist on the cluster."""
        return self in LAUNCHED_PHASES


_UP = frozenset({PodPhase.PENDING, PodPhase.CREATING, PodPhase.RUNNING})
#: Slots that no longer belong to their role (they do not count in ``status.replicas``).
LEFT_OUT_PHASES = frozenset({PodPhase.SHRUNK, PodPhase.REMOVED})
#: ``is_launched``, as a set (loops over thousands of pods test membership, which costs less than a call).
LAUNCHED_PHASES = _UP
#: Slots that are up or coming up: what a role has "alive" for minReplicas.
ALIVE_PHASES = frozenset({PodPhase.WAITING, *_UP})
_DOWN = frozenset({PodPhase.WAITING, PodPhase.FAILED, PodPhase.SHRUNK, PodPhase.REMOVED})

POD_TRANSITIONS: Mapping[PodPhase, frozenset[PodPhase]] = {
    PodPhase.WAITING: frozenset({PodPhase.PENDING, PodPhase.FAILED, PodPhase.SHRUNK, PodPhase.REMOVED}),
    **{phase: (_UP | _DOWN | {PodPhase.SUCCEEDED}) - {phase} for phase in _UP},
    PodPhase.SHRUNK: frozenset({PodPhase.WAITING, PodPhase.REMOVED}),
    # A finished slot stays finished; only a scale-in takes it out of the role.
    PodPhase.SUCCEEDED: frozenset({PodPhase.REMOVED}),
    PodPhase.FAILED: frozenset({PodPhase.REMOVED}),
    PodPhase.REMOVED: frozenset(),
}


class TransitionError(ValueError):
    """A move the state machine forbids: a bug in the controller, never a user's mistake."""


def check_job_transition(current: JobPhase, target: JobPhase) -> None:
    if current != target and target not in JOB_TRANSITIONS[current]:
        raise TransitionError(f"job phase {current.value} cannot become {target.value}")


def check_pod_transition(current: PodPhase, target: PodPhase) -> None:
    if current != target and target not in POD_TRANSITIONS[current]:
        raise TransitionError(f"pod phase {current.value} cannot become {target.value}")
