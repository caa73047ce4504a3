"""What the operator creates for a job: its pods, a headless Service, and a ConfigMap with the Horovod
host-discovery script. Every object carries the job's labels and an owner reference, so deleting the job
deletes them (garbage collection), and so a restarted operator finds them again by label.
"""

from __future__ import annotations

import copy
from typing import Any

from trainguard.agent.options_for_job import agent_options
from trainguard.api import FrameworkType, TrainingJob
from trainguard.backends.k8s.kinds import JobKind
from trainguard.controller.backend import LaunchPod

Obj = dict[str, Any]

LABEL_JOB = "trainguard.io/job"
LABEL_ROLE = "trainguard.io/role"
LABEL_INDEX = "trainguard.io/index"
LABEL_GENERATION = "trainguard.io/generation"
#: On pods: the kind of the job that owns them (so one watch serves every kind).
LABEL_KIND = "trainguard.io/kind"
ANNOTATION_IN_PLACE = "trainguard.io/in-place-restarts"
DISCOVERY_KEY = "discover_hosts.sh"
DISCOVERY_DIR = "/etc/edl"
#: The Python the agent runs with inside the pod's image.
AGENT_PYTHON = "python"


def job_selector(job_name: str) -> str:
    return f"{LABEL_JOB}={job_name}"


def service_name(job: TrainingJob) -> str:
    return job.name


def discovery_name(job: TrainingJob) -> str:
    return f"{job.name}-discovery"


def owner_reference(kind: JobKind, job: TrainingJob) -> Obj:
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "name": job.name,
        "uid": job.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _meta(kind: JobKind, job: TrainingJob, name: str, labels: dict[str, str]) -> Obj:
    return {
        "name": name,
        "namespace": job.metadata.namespace,
        "labels": {LABEL_JOB: job.name, LABEL_KIND: kind.kind, **labels},
        "ownerReferences": [owner_reference(kind, job)],
    }


def pod(
    kind: JobKind, job: TrainingJob, launch: LaunchPod, scheduler: str | None, world: dict[str, int]
) -> Obj:
    """The pod of one launch: the role's template, its first container run under the agent, Kubernetes
    restarts off (trainguard decides restarts), spread away from the nodes the launch avoids."""
    spec_of_role = job.role(launch.role)
    template = copy.deepcopy(spec_of_role.template)
    meta = template.get("metadata") or {}
    spec: Obj = template.get("spec") or {}
    labels = {
        **{str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        LABEL_ROLE: launch.role,
        LABEL_INDEX: str(launch.index),
        LABEL_GENERATION: str(launch.generation),
    }
    metadata = _meta(kind, job, launch.pod, labels)
    metadata["annotations"] = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    spec["restartPolicy"] = "Never"
    spec["hostname"] = launch.pod
    spec["subdomain"] = service_name(job)
    if scheduler:
        spec["schedulerName"] = scheduler
    containers = spec.get("containers") or [{"name": "main"}]
    spec["containers"] = containers
    first = containers[0]
    first["env"] = [*_environment(job, launch, world), *(first.get("env") or [])]
    argv = spec_of_role.argv
    if argv:
        # The agent writes its final report (exit, or gave-up with reason Hang) to the termination message.
        first["command"] = [
            AGENT_PYTHON,
            "-m",
            "trainguard.agent",
            *agent_options(job, launch.role),
            "--",
            *argv,
        ]
        first.setdefault("terminationMessagePath", "/dev/termination-log")
        first.pop("args", None)
    if job.spec.framework_type is FrameworkType.HOROVOD:
        _mount_discovery(job, spec, first)
    if launch.avoid_nodes:
        _avoid(spec, launch.avoid_nodes)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _environment(job: TrainingJob, launch: LaunchPod, world: dict[str, int]) -> list[Obj]:
    ranks_before = 0
    for role in job.spec.replica_specs:
        if role == launch.role:
            break
        ranks_before += world.get(role, 0)
    first_pod = f"{job.name}-{next(iter(job.spec.replica_specs))}-0"
    values = {
        "TRAININGJOB_NAME": job.name,
        "TRAININGJOB_NAMESPACE": job.metadata.namespace,
        "TRAININGJOB_UID": job.metadata.uid or "",
        "TRAININGJOB_REPLICA_NAME": launch.role,
        "TRAININGJOB_REPLICA_INDEX": str(launch.index),
        "TRAININGJOB_REPLICA_RESTARTCOUNT": str(launch.restart_count),
        "TRAININGJOB_POD_NAME": launch.pod,
        "TRAINGUARD_GENERATION": str(launch.generation),
        "MASTER_ADDR": f"{first_pod}.{service_name(job)}",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": str(sum(world.values())),
        "RANK": str(ranks_before + launch.index),
    }
    return [{"name": name, "value": value} for name, value in values.items()]


def _mount_discovery(job: TrainingJob, spec: Obj, container: Obj) -> None:
    volume = "trainguard-discovery"
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {"name": volume, "configMap": {"name": discovery_name(job), "defaultMode": 0o755}},
    ]
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": volume, "mountPath": DISCOVERY_DIR, "readOnly": True},
    ]


def _avoid(spec: Obj, nodes: tuple[str, ...]) -> None:
    term = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": list(nodes)}]}
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    # Terms are ORed: the exclusion has to be part of every one of them.
    for existing in terms:
        existing.setdefault("matchFields", []).extend(term["matchFields"])
    required["nodeSelectorTerms"] = terms


def service(kind: JobKind, job: TrainingJob) -> Obj:
    """Headless: every pod gets a DNS name ``<pod>.<job>.<namespace>.svc`` for rendezvous."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(kind, job, service_name(job), {}),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: job.name},
        },
    }


def discovery_script(version: int, hosts: tuple[str, ...]) -> str:
    lines = "\n".join(f"echo {host}" for host in hosts)
    return f"#!/bin/sh\n# trainguard host discovery, version {version}\n{lines}\n"


def discovery_config_map(kind: JobKind, job: TrainingJob, version: int, hosts: tuple[str, ...]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            **_meta(kind, job, discovery_name(job), {}),
            "annotations": {"trainguard.io/discovery-version": str(version)},
        },
        "data": {DISCOVERY_KEY: discovery_script(version, hosts)},
    }
