"""The rendezvous store of a PyTorch job: its pod and its ClusterIP Service (``trainguard.backends.k8s.store_pod``
keeps them while the job's pods may run).

A PyTorch job's pods run torchrun's elastic agent in one c10d rendezvous at
``<job>-rdzv.<namespace>.svc:29400`` (``trainguard.backends.k8s.services``): a Service in front of the pod
``<job>-rendezvous``, which serves only the store (``trainguard.pod.rendezvous_store``). Every agent is a client of
it (``is_host=false``), so losing any worker pod never loses the rendezvous.
"""

from __future__ import annotations

import copy

from trainguard.api import TrainingJob
from trainguard.backends.k8s.delivery import deliver_agent, entry
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.manifests import PodSettings
from trainguard.backends.k8s.metadata import (
    LABEL_COMPONENT,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_ROLE,
    RENDEZVOUS,
    Obj,
    object_meta,
)
from trainguard.backends.k8s.services import RENDEZVOUS_PORT, rendezvous_endpoint, rendezvous_service_name
from trainguard.controller import torchrun_command

RENDEZVOUS_MODULE = "trainguard.pod.rendezvous_store"
#: The store's memory request: it holds about 21 MB serving 50 clients (python3 and the rendezvous' keys; no
#: torch), measured with torch 2.13's clients; the rest is room for a big job's state.
STORE_MEMORY = "64Mi"
#: What the store's pod takes from the first torchrun role's pod template: where it may run and pull from.
_PLACEMENT_FIELDS = ("imagePullSecrets", "nodeSelector", "tolerations", "priorityClassName")


def rendezvous_pod_name(job: TrainingJob) -> str:
    return f"{job.name}-{RENDEZVOUS}"


def hosts_rendezvous(job: TrainingJob) -> bool:
    """Whether trainguard runs a rendezvous store for the job: torchrun's c10d rendezvous, with no
    ``rdzvHost`` of the job's own, and some role whose pods join it."""
    rdzv = torchrun_command.rendezvous(job, rendezvous_endpoint(job))
    return rdzv is not None and rdzv.hosted and bool(torchrun_command.torchrun_roles(job))


def rendezvous_service(kind: JobKind, job: TrainingJob) -> Obj:
    """A ClusterIP Service in front of the store's pod: a stable address that outlives every pod."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(kind, job, rendezvous_service_name(job), {LABEL_COMPONENT: RENDEZVOUS}),
        "spec": {
            "selector": {LABEL_JOB: job.name, LABEL_COMPONENT: RENDEZVOUS},
            "ports": [
                {
                    "name": RENDEZVOUS,
                    "port": RENDEZVOUS_PORT,
                    "targetPort": RENDEZVOUS_PORT,
                    "protocol": "TCP",
                }
            ],
        },
    }


def rendezvous_pod(kind: JobKind, job: TrainingJob, settings: PodSettings) -> Obj:
    """The pod that serves the job's rendezvous store: the first torchrun role's image (it has python3, as the
    agent needs; the store needs nothing else, ``trainguard.pod.tcpstore``), no GPUs, a little memory, kept away from the job's replicas where the cluster allows (losing a worker's node
    should not lose the store too). Its labels make it no replica: the controller never sees it."""
    role = torchrun_command.torchrun_roles(job)[0]
    template_spec: Obj = job.role(role).template.get("spec") or {}
    source: Obj = (template_spec.get("containers") or [{}])[0]
    container: Obj = {
        "name": "store",
        "image": source.get("image", ""),
        "command": [
            entry(settings.agent_delivery),
            "python",
            "-m",
            RENDEZVOUS_MODULE,
            "--port",
            str(RENDEZVOUS_PORT),
        ],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "ports": [{"name": RENDEZVOUS, "containerPort": RENDEZVOUS_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": RENDEZVOUS_PORT}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "100m", "memory": STORE_MEMORY}},
    }
    if "imagePullPolicy" in source:
        container["imagePullPolicy"] = source["imagePullPolicy"]
    replicas = {
        "labelSelector": {
            "matchExpressions": [
                {"key": LABEL_JOB, "operator": "In", "values": [job.name]},
                {"key": LABEL_INDEX, "operator": "Exists"},
            ]
        },
        "topologyKey": "kubernetes.io/hostname",
    }
    spec: Obj = {
        **{key: copy.deepcopy(template_spec[key]) for key in _PLACEMENT_FIELDS if key in template_spec},
        # A crashed store restarts in place; a lost pod is created again by the operator.
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 5,
        "containers": [container],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": replicas}
                ]
            }
        },
    }
    deliver_agent(spec, container, settings.agent_image, settings.agent_delivery)
    if settings.scheduler:
        spec["schedulerName"] = settings.scheduler
    labels = {LABEL_ROLE: RENDEZVOUS, LABEL_COMPONENT: RENDEZVOUS}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": object_meta(kind, job, rendezvous_pod_name(job), labels),
        "spec": spec,
    }
