"""What a local pod runs: its argv, environment and working directory, as the operator would give them.

Images are ignored locally; the role's first container supplies ``command``/``args``/``env``/``workingDir``.
``$(VAR)`` references in command, args and env values are expanded as Kubernetes does (``$$(VAR)`` stays
literal), so a spec written for a cluster runs here unchanged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainguard.api import FrameworkType, TrainingJob, pod_name

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class PodIdentity:
    job: TrainingJob
    uid: str
    role: str
    index: int
    restarts: int
    #: The loopback port this job's rendezvous (and MASTER_PORT) uses.
    port: int

    @property
    def name(self) -> str:
        return pod_name(self.job.name, self.role, self.index)


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined names are replaced, undefined ones kept as written."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _REFERENCE.sub(substitute, text)


def command(job: TrainingJob, role: str) -> list[str]:
    """The role's command + args; ValueError naming the field when there is none."""
    argv = job.role(role).argv
    if not argv:
        raise ValueError(
            f"spec.replicaSpecs.{role}.template.spec.containers[0].command: the local runtime runs the "
            "container's command (images are ignored locally); give a command, e.g. [python, train.py]"
        )
    return argv


def ordered_roles(job: TrainingJob) -> list[str]:
    """Roles in rank order: a master/launcher role first (rank 0, as Kubeflow does), then the rest."""
    leaders = ("master", "launcher", "chief")

    def key(role: str) -> tuple[int, int]:
        kind = (job.role(role).replica_type or role).lower()
        return (
            0 if kind in leaders or role.lower() in leaders else 1,
            list(job.spec.replica_specs).index(role),
        )

    return sorted(job.spec.replica_specs, key=key)


def pod_environment(
    pod: PodIdentity,
    replicas: Mapping[str, int],
    base: Mapping[str, str],
    extra: Mapping[str, str] = {},
) -> dict[str, str]:
    """The full environment of one launch: ``base`` (the control plane's own), ours, then the container's."""
    job = pod.job
    rank_offset = 0
    for role in ordered_roles(job):
        if role == pod.role:
            break
        rank_offset += replicas.get(role, 0)
    ours = {
        "TRAININGJOB_NAME": job.name,
        "TRAININGJOB_NAMESPACE": job.metadata.namespace,
        "TRAININGJOB_UID": pod.uid,
        "TRAININGJOB_REPLICA_NAME": pod.role,
        "TRAININGJOB_REPLICA_INDEX": str(pod.index),
        "TRAININGJOB_REPLICA_RESTARTCOUNT": str(pod.restarts),
        "TRAININGJOB_POD_NAME": pod.name,
        "TRAINGUARD_RDZV_ENDPOINT": f"{LOOPBACK}:{pod.port}",
        "MASTER_ADDR": LOOPBACK,
        "MASTER_PORT": str(pod.port),
        "WORLD_SIZE": str(sum(replicas.values())),
        "RANK": str(rank_offset + pod.index),
        "PYTHONUNBUFFERED": "1",
        **_torchrun_defaults(pod, replicas),
        **extra,
    }
    env = {**base, **ours}
    for item in job.role(pod.role).container.get("env") or []:
        if isinstance(item, dict) and "name" in item and "value" in item and item["value"] is not None:
            env[str(item["name"])] = expand(str(item["value"]), env)
    return env


def _torchrun_defaults(pod: PodIdentity, replicas: Mapping[str, int]) -> dict[str, str]:
    """torchrun reads ``PET_<OPTION>`` as the default of ``--<option>``; a plain ``torchrun train.py``
    in a pod then joins the job's c10d rendezvous with the job's elastic bounds."""
    job = pod.job
    if job.spec.framework_type is not FrameworkType.PYTORCH and job.spec.elastic is None:
        return {}
    elastic = job.spec.elastic
    role = job.role(pod.role)
    env = {
        "PET_RDZV_BACKEND": elastic.rdzv_backend if elastic else "c10d",
        "PET_RDZV_ENDPOINT": f"{LOOPBACK}:{pod.port}",
        "PET_RDZV_ID": pod.uid,
        "PET_NNODES": f"{role.min_count}:{role.max_count}" if role.is_elastic else str(replicas[pod.role]),
        "PET_NPROC_PER_NODE": str(elastic.n_proc_per_node) if elastic else "1",
    }
    if elastic and elastic.max_restarts is not None:
        env["PET_MAX_RESTARTS"] = str(elastic.max_restarts)
    return env


def argv_and_cwd(pod: PodIdentity, env: Mapping[str, str], job_workdir: str) -> tuple[list[str], Path]:
    """The expanded command and the directory it runs in (``workingDir``, relative to the submit dir)."""
    argv = [expand(part, env) for part in command(pod.job, pod.role)]
    working = pod.job.role(pod.role).container.get("workingDir")
    cwd = Path(job_workdir) / expand(str(working), env) if working else Path(job_workdir)
    return argv, cwd


def inherited_environment() -> dict[str, str]:
    """What pods inherit from the control plane: its environment minus trainguard's own settings."""
    return {key: value for key, value in os.environ.items() if not key.startswith("TRAINGUARD_")}
