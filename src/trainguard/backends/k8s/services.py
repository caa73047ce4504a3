"""Where a job's pods find each other: the job's headless Service, which gives every pod the DNS name
``<pod>.<job>.<namespace>.svc``, and the names of the rendezvous store's Service (``<job>-rdzv``, the store's
objects are in ``trainguard.backends.k8s.rendezvous``); ``network`` is what the launches are told."""

from __future__ import annotations

import hashlib

from trainguard.api import TrainingJob
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.metadata import LABEL_JOB, Obj, object_meta
from trainguard.controller.launchspec import DEFAULT_MASTER_PORT, Network
from trainguard.pod.checks import RING_PORT

RENDEZVOUS_PORT = 29400
#: Services are DNS-1035 labels.
_MAX_SERVICE_NAME = 63


def service_name(job: TrainingJob) -> str:
    return job.name


def rendezvous_service_name(job: TrainingJob) -> str:
    """``<job>-rdzv``; a name past 63 characters is cut and made unique with a digest of the job's name."""
    name = f"{job.name}-rdzv"
    if len(name) <= _MAX_SERVICE_NAME:
        return name
    digest = hashlib.sha256(job.name.encode()).hexdigest()[:8]
    return f"{job.name[: _MAX_SERVICE_NAME - len(digest) - 6]}-{digest}-rdzv"


def rendezvous_endpoint(job: TrainingJob) -> str:
    """The store's address as the agents use it: the Service's DNS name, found through the pods' search path."""
    return f"{rendezvous_service_name(job)}.{job.metadata.namespace}.svc:{RENDEZVOUS_PORT}"


def network(job: TrainingJob) -> Network:
    """Where the job's pods find each other: the rendezvous Service, and each pod's name behind the job's
    headless Service."""
    return Network(
        rendezvous_endpoint=rendezvous_endpoint(job),
        pod_address=f"{{pod}}.{service_name(job)}",
        master_port=DEFAULT_MASTER_PORT,
        ring_port=RING_PORT,
    )


def service(kind: JobKind, job: TrainingJob) -> Obj:
    """Headless: every pod gets a DNS name ``<pod>.<job>.<namespace>.svc`` for rendezvous."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(kind, job, service_name(job), {}),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: job.name},
        },
    }
