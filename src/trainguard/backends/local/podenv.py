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

from trainguard.api import TrainingJob, pod_name
from trainguard.controller.launch import render, torchrun_env

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

    @property
    def endpoint(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def job_with_uid(self) -> TrainingJob:
        """The job as the controller sees it: with the uid its rendezvous is named after."""
        if self.job.metadata.uid == self.uid:
            return self.job
        return self.job.model_copy(
            update={"metadata": self.job.metadata.model_copy(update={"uid": self.uid})}
        )


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
        **torchrun_env(pod.job_with_uid, pod.endpoint),
        **extra,
    }
    env = {**base, **ours}
    for item in job.role(pod.role).container.get("env") or []:
        if isinstance(item, dict) and "name" in item and "value" in item and item["value"] is not None:
            env[str(item["name"])] = expand(str(item["value"]), env)
    return env


def argv_and_cwd(pod: PodIdentity, env: Mapping[str, str], job_workdir: str) -> tuple[list[str], Path]:
    """The expanded command and the directory it runs in (``workingDir``, relative to the submit dir).

    A PyTorch job's command runs under torchrun's elastic agent in the job's rendezvous
    (``trainguard.controller.launch``); ``LaunchError`` (a ValueError) for a torchrun command without a script.
    """
    argv = [expand(part, env) for part in command(pod.job, pod.role)]
    argv = render(pod.job_with_uid, pod.role, pod.endpoint, argv)
    working = pod.job.role(pod.role).container.get("workingDir")
    cwd = Path(job_workdir) / expand(str(working), env) if working else Path(job_workdir)
    return argv, cwd


def inherited_environment() -> dict[str, str]:
    """What pods inherit from the control plane: its environment minus trainguard's own settings."""
    return {key: value for key, value in os.environ.items() if not key.startswith("TRAINGUARD_")}
