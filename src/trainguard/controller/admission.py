"""Whether a job runs or is held: decided here once, for every backend.

A backend runs at most so many pods of one job (``PodLimit``): the operator because a job's status, with every
pod slot, is one object the API server stores in at most 1.5 MiB; the local runtime because every pod is a
process on its machine. A job past the limit is accepted and held: it is not reconciled (no pod slot, no pod),
its status says why (phase ``Pending``), one Warning event per size says the same, and once it fits it starts
from an empty status, as a new job does. A backend gives its limit and the words that tell users how to make
the job fit (its own fields or commands), and carries the result out: it writes the held status, records the
event, or reconciles.

The two kinds of limit differ in what they count and in the words users already read:

=========================  ==============================================  =======================================
                           ``STATUS_OBJECT`` (the operator)                ``MACHINE`` (the local runtime)
=========================  ==============================================  =======================================
counted at                 every role at ``maxReplicas`` (as far as a      the replicas now
                           scale or an HPA can take it)
a started job past it      held, its status left as it is (it holds the    never held: a request that would grow
                           pods it runs); only the event is sent           it past the limit is refused
status / event reason      ``TooLarge`` / ``TooLarge``                     ``Unschedulable`` / ``FailedScheduling``
status message             the words                                       ``job NAME waits: `` and the words
condition                  ``Pending``, with the same reason and message   none
=========================  ==============================================  =======================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from trainguard.api import TrainingJob
from trainguard.controller.backend import EmitEvent, EventType
from trainguard.controller.phases import JobPhase
from trainguard.controller.status import Condition, JobStatus


@dataclass(frozen=True)
class LimitKind:
    """Why a backend has a limit, which decides how a job is counted against it and how a held job reads."""

    name: str
    #: Count every role at ``maxReplicas`` (else at its replicas now).
    counts_largest: bool
    #: A started job past the limit is held too (else only one not started yet).
    holds_started: bool
    #: The held status's reason (and its condition's).
    reason: str
    #: The Warning event's reason.
    event_reason: str
    #: The held status's message, from ``{job}`` (its name) and ``{why}`` (the backend's words).
    status_message: str
    #: The held status has a ``Pending`` condition with the reason and the message.
    condition: bool


#: The job's status, every pod slot in it, is one stored object (Kubernetes: etcd's 1.5 MiB).
STATUS_OBJECT = LimitKind(
    name="status-object",
    counts_largest=True,
    holds_started=True,
    reason="TooLarge",
    event_reason="TooLarge",
    status_message="{why}",
    condition=True,
)
#: Every pod is a process on this machine (the local runtime).
MACHINE = LimitKind(
    name="machine",
    counts_largest=False,
    holds_started=False,
    reason="Unschedulable",
    event_reason="FailedScheduling",
    status_message="job {job} waits: {why}",
    condition=False,
)


@dataclass(frozen=True)
class PodLimit:
    """The most pods of one job a backend runs, and the kind of limit that is."""

    pods: int
    kind: LimitKind


@dataclass(frozen=True)
class Oversize:
    """A job past a backend's limit, as counted: what the backend's words are made of."""

    job: str
    limit: int
    #: (role, pods counted), in the job's order of roles.
    counted: tuple[tuple[str, int], ...]
    #: Counted past its replicas (some role at ``maxReplicas``).
    grows: bool

    @property
    def pods(self) -> int:
        return sum(count for _, count in self.counted)


#: The backend's words for a job past its limit: the number, the limit and the fix, as its users write them.
Words = Callable[[Oversize], str]


@dataclass(frozen=True)
class Admit:
    """Reconcile the job."""

    #: It was held until now: it starts from an empty status, as a new job (not from the held one).
    fresh: bool = False


@dataclass(frozen=True)
class Hold:
    """Do not reconcile the job; write this status (None: leave the stored one as it is) and record this event
    (None: said already, with the status that shows it)."""

    message: str
    status: JobStatus | None
    event: EmitEvent | None


def count(job: TrainingJob, kind: LimitKind, replicas: Mapping[str, int] | None = None) -> int:
    """The job's pods as ``kind`` counts them (``replicas``: role -> count, for the roles that have another;
    a kind that counts every role at its largest does not read it)."""
    return sum(pods for _, pods in _counted(job, kind, replicas))


def oversize(job: TrainingJob, limit: PodLimit, replicas: Mapping[str, int] | None = None) -> Oversize | None:
    """The job past ``limit`` (at ``replicas``, role -> count, where given), or None when it fits."""
    counted = _counted(job, limit.kind, replicas)
    if sum(pods for _, pods in counted) <= limit.pods:
        return None
    specs = job.spec.replica_specs
    grows = limit.kind.counts_largest and any(spec.max_count > spec.replicas for spec in specs.values())
    return Oversize(job.name, limit.pods, counted, grows)


def is_held(status: JobStatus, kind: LimitKind) -> bool:
    """Whether the stored status is that of a held job (one the controller has not taken up)."""
    return status.started_at is None and status.reason == kind.reason


def admit(job: TrainingJob, status: JobStatus, limit: PodLimit, words: Words, now: float) -> Admit | Hold:
    """Whether to reconcile the job with its stored ``status``, or hold it; ``now`` is the time of a held
    status and of the event."""
    kind = limit.kind
    over = oversize(job, limit)
    if over is None:
        return Admit(fresh=is_held(status, kind))
    started = status.started_at is not None
    if started and not kind.holds_started:
        return Admit()
    why = words(over)
    message = kind.status_message.format(job=job.name, why=why)
    event = EmitEvent(
        f"{job.metadata.uid or ''}/held/{over.pods}", EventType.WARNING, kind.event_reason, why, now
    )
    if started:
        return Hold(message, None, event)
    if is_held(status, kind) and status.message == message and status.phase is JobPhase.PENDING:
        return Hold(message, None, None)
    conditions: tuple[Condition, ...] = ()
    if kind.condition:
        pending = Condition(
            type=JobPhase.PENDING,
            status="True",
            reason=kind.reason,
            message=message,
            last_transition_time=now,
            last_probe_time=now,
        )
        conditions = (pending,)
    return Hold(message, JobStatus(reason=kind.reason, message=message, conditions=conditions), event)


def _counted(
    job: TrainingJob, kind: LimitKind, replicas: Mapping[str, int] | None
) -> tuple[tuple[str, int], ...]:
    given = replicas or {}
    specs = job.spec.replica_specs.items()
    if kind.counts_largest:
        return tuple((role, spec.max_count) for role, spec in specs)
    return tuple((role, given.get(role, spec.replicas)) for role, spec in specs)
