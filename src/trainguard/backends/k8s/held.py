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

The decision is the engine's (``trainguard.controller.admission``, limit kind ``STATUS_OBJECT``); here are the
number and the words that name the resource's own fields. ``MAX_JOB_PODS`` comes from
``benchmarks/job_size.py`` (docs/operator.md, "How big a job runs").
"""

from __future__ import annotations

from trainguard.backends.k8s.kinds import PYTORCHJOB, JobKind
from trainguard.controller.admission import STATUS_OBJECT, Oversize, PodLimit

#: The most pods of one job the operator runs. At 1,000 pods a job's status is 0.64 MB, and 0.99 MB once its
#: history and issued keys are full (1.16 MB with a job name of 50 characters), against etcd's 1.5 MiB; one
#: reconcile takes 0.03 s, and 0.3 s when 500 pods fail at once (2 cores). At 2,000 the worn status reaches
#: 1.5 MB: it can no longer be stored.
MAX_JOB_PODS = 1_000
LIMIT = PodLimit(MAX_JOB_PODS, STATUS_OBJECT)


def explain(kind: JobKind, over: Oversize) -> str:
    """Why the operator does not run the job: the number, the limit and the fix, in the fields of ``kind``."""
    pods, limit = over.pods, over.limit
    size = f"can grow to {pods:,} pods" if over.grows else f"has {pods:,} pods"
    if len(over.counted) > 1 or over.grows:
        counted = ", ".join(f"{role} {count:,}" for role, count in over.counted)
        size += f" ({counted}{' at maxReplicas' if over.grows else ''})"
    role, count = max(over.counted, key=lambda item: item[1])
    room = limit - (pods - count)
    if room >= 1:
        fix = f"lower {_fields(kind, role)} to {room:,} or fewer"
    else:
        fix = f"lower the roles' replicas/maxReplicas to {limit:,} pods in all"
    return (
        f"job {over.job} {size}, and the operator runs at most {limit:,} pods of a job (every pod is in "
        f"the job's status, which the API server stores in one object of at most 1.5 MiB): {fix}, or split "
        "the job into several"
    )


def _fields(kind: JobKind, role: str) -> str:
    """The fields that size ``role``, in the resource as users write it."""
    if kind.kind == PYTORCHJOB.kind:
        return f"spec.pytorchReplicaSpecs.{role.capitalize()}.replicas/spec.elasticPolicy.maxReplicas"
    return f"spec.replicaSpecs.{role}.replicas/maxReplicas"
