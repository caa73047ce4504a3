"""Jobs too large for the operator: accepted and held, not reconciled until they fit.

The controller keeps every pod slot of a job in the job's status, and the API server stores the job resource,
status and all, as one object in etcd, which takes at most 1.5 MiB per write (``--max-request-bytes``). Past
that the status can never be written, and a reconcile that cannot store its decisions would only fail again
and again. So the operator runs at most ``MAX_JOB_PODS`` pods of one job, counted at the job's largest (every
role at ``maxReplicas``: as far as a scale or an HPA can take it), although the job model allows 100,000 per
role. A larger job is accepted and held: its status says why (phase ``Pending``, reason ``TooLarge``, a
``Pending`` condition with the same reason and message), one Warning event says so per size, and nothing else
happens (no pod, no pod slot, no retry). Edited down to the limit, it starts as any new job does.

A job that has started and is then edited past the limit is held too, but its status stays as it was (it
holds the pods it runs and what the controller knows of them): its pods go on as they are, unwatched, until
the job is edited back.

``MAX_JOB_PODS`` comes from ``benchmarks/job_size.py`` (docs/operator.md, "How big a job runs").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.k8s.kinds import PYTORCHJOB, JobKind
from trainguard.backends.k8s.status import status_document
from trainguard.controller import Condition, EmitEvent, EventType, JobPhase, JobStatus

Obj = dict[str, Any]

#: The most pods of one job the operator runs. At 1,000 pods a job's status is 0.64 MB, and 0.99 MB once its
#: history and issued keys are full (1.16 MB with a job name of 50 characters), against etcd's 1.5 MiB; one
#: reconcile takes 0.03 s, and 0.3 s when 500 pods fail at once (2 cores). At 2,000 the worn status reaches
#: 1.5 MB: it can no longer be stored.
MAX_JOB_PODS = 1_000
#: The status reason, condition reason and event reason of a held job.
HELD_REASON = "TooLarge"


def job_pods(job: TrainingJob) -> int:
    """The most pods the job can have: every role at ``maxReplicas`` (``replicas`` where it has none), as far
    as scaling can take it, and the pod slots the controller would keep for it."""
    return sum(spec.max_count for spec in job.spec.replica_specs.values())


def too_large(job: TrainingJob, kind: JobKind, limit: int = MAX_JOB_PODS) -> str | None:
    """Why the operator does not run the job (the number, the limit and the fix), or None when it fits."""
    pods = job_pods(job)
    if pods <= limit:
        return None
    roles = job.spec.replica_specs
    grows = any(spec.max_count > spec.replicas for spec in roles.values())
    counted = ", ".join(f"{role} {spec.max_count:,}" for role, spec in roles.items())
    size = f"can grow to {pods:,} pods" if grows else f"has {pods:,} pods"
    if len(roles) > 1 or grows:
        size += f" ({counted}{' at maxReplicas' if grows else ''})"
    role, spec = max(roles.items(), key=lambda item: item[1].max_count)
    room = limit - (pods - spec.max_count)
    if room >= 1:
        fix = f"lower {_fields(kind, role)} to {room:,} or fewer"
    else:
        fix = f"lower the roles' replicas/maxReplicas to {limit:,} pods in all"
    return (
        f"job {job.name} {size}, and the operator runs at most {limit:,} pods of a job (every pod is in "
        f"the job's status, which the API server stores in one object of at most 1.5 MiB): {fix}, or split "
        "the job into several"
    )


@dataclass(frozen=True)
class Hold:
    """What the operator does with a job it holds: no reconcile, this status (None: leave the status as it
    is, for a job that has started) and this event."""

    message: str
    status: Obj | None
    event: EmitEvent


def hold(kind: JobKind, job: TrainingJob, obj: Obj, now: float, limit: int = MAX_JOB_PODS) -> Hold | None:
    """None for a job that fits (reconcile it); else how to hold it. ``obj`` is the resource as read, ``now``
    the time of the status and the event."""
    message = too_large(job, kind, limit)
    if message is None:
        return None
    uid = str(obj["metadata"].get("uid") or "")
    event = EmitEvent(f"{uid}/held/{job_pods(job)}", EventType.WARNING, HELD_REASON, message, now)
    if (obj.get("status") or {}).get("startedAt") is not None:
        return Hold(message, None, event)
    condition = Condition(
        type=JobPhase.PENDING,
        status="True",
        reason=HELD_REASON,
        message=message,
        last_transition_time=now,
        last_probe_time=now,
    )
    status = JobStatus(reason=HELD_REASON, message=message, conditions=(condition,))
    return Hold(message, status_document(kind, job, status), event)


def is_held(obj: Obj) -> bool:
    """Whether the resource's status is that of a held job (one the controller has not taken up)."""
    status = obj.get("status") or {}
    return status.get("reason") == HELD_REASON and status.get("startedAt") is None


def already_held(obj: Obj, held: Hold) -> bool:
    """Whether the resource already shows ``held`` (written by an earlier reconcile): nothing to do again."""
    status = obj.get("status") or {}
    if held.status is None:
        return False
    return is_held(obj) and status.get("message") == held.message and status.get("phase") == "Pending"


def _fields(kind: JobKind, role: str) -> str:
    """The fields that size ``role``, in the resource as users write it."""
    if kind.kind == PYTORCHJOB.kind:
        return f"spec.pytorchReplicaSpecs.{role.capitalize()}.replicas/spec.elasticPolicy.maxReplicas"
    return f"spec.replicaSpecs.{role}.replicas/maxReplicas"
