"""What every object the operator creates for a job carries: the job's labels, by which a restarted operator
finds it again (and one watch serves every kind), and an owner reference to the job, so that deleting the job
deletes them (garbage collection). And what the labels tell of a pod: a replica of the job, or one of its
components (the rendezvous store)."""

from __future__ import annotations

from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.k8s.kinds import JobKind

Obj = dict[str, Any]

LABEL_JOB = "trainguard.io/job"
LABEL_ROLE = "trainguard.io/role"
LABEL_INDEX = "trainguard.io/index"
LABEL_GENERATION = "trainguard.io/generation"
#: On pods: the kind of the job that owns them (so one watch serves every kind).
LABEL_KIND = "trainguard.io/kind"
#: On the rendezvous store's pod and Service (replica pods have none): what they are.
LABEL_COMPONENT = "trainguard.io/component"
RENDEZVOUS = "rendezvous"
#: On an isolated Node: when it was isolated and its strikes (``isolation``, for its cool-down).
ANNOTATION_ISOLATED_AT = "trainguard.io/isolated-at"
ANNOTATION_ISOLATION_STRIKES = "trainguard.io/isolation-strikes"
#: On a node checker's pod: its latest check of its node (``nodechecker``).
ANNOTATION_NODE_CHECK = "trainguard.io/node-check"


def owner_reference(kind: JobKind, job: TrainingJob) -> Obj:
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "name": job.name,
        "uid": job.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(kind: JobKind, job: TrainingJob, name: str, labels: dict[str, str]) -> Obj:
    """The ``metadata`` of an object of the job: its name, the job's namespace and labels (and ``labels``), and
    the job as its owner."""
    return {
        "name": name,
        "namespace": job.metadata.namespace,
        "labels": {LABEL_JOB: job.name, LABEL_KIND: kind.kind, **labels},
        "ownerReferences": [owner_reference(kind, job)],
    }


def is_rendezvous(pod: Obj) -> bool:
    """The job's rendezvous store (``trainguard.backends.k8s.rendezvous``), not a replica."""
    return (pod.get("metadata", {}).get("labels") or {}).get(LABEL_COMPONENT) == RENDEZVOUS
