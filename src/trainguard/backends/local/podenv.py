"""What a local pod runs: the controller's launch spec (``trainguard.controller.launchspec``) rendered as a
process: its argv, environment and working directory.

Images are ignored locally; the role's first container supplies ``command``/``args``/``env``/``workingDir``.
``$(VAR)`` references in command, args and env values are expanded as Kubernetes does (``$$(VAR)`` stays
literal), so a spec written for a cluster runs here unchanged.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from trainguard.api import TrainingJob
from trainguard.controller.launchspec import LaunchSpec, Network

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
LOOPBACK = "127.0.0.1"
#: What every local pod gets unless the control plane's environment or the container's ``env`` says otherwise.
#: All of a local job's pods share this machine's cores, as torchrun's processes share a node's, and torchrun then
#: gives each one OpenMP thread: more threads per worker spin in OpenMP's barriers while the other processes hold
#: the cores (a small model's 200 steps on a loaded 2-core machine: 15-16 s of CPU with 2 threads, 0.5 s with 1).
DEFAULTS = {"OMP_NUM_THREADS": "1"}


def network(port: int) -> Network:
    """Where a local job's pods find each other: every pod on loopback, the job's port for its rendezvous
    store and for ``MASTER_PORT``."""
    return Network(rendezvous_endpoint=f"{LOOPBACK}:{port}", pod_address=LOOPBACK, master_port=port)


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


def pod_environment(
    job: TrainingJob,
    role: str,
    spec: LaunchSpec,
    base: Mapping[str, str],
    extra: Mapping[str, str] = {},
) -> dict[str, str]:
    """The full environment of one launch: ``DEFAULTS``, ``base`` (the control plane's own), the launch spec's,
    the local runtime's ``extra``, then the container's own ``env`` (expanded, and winning, as on Kubernetes)."""
    env = {**DEFAULTS, **base, **spec.environment, **extra}
    for item in job.role(role).container.get("env") or []:
        if isinstance(item, dict) and "name" in item and "value" in item and item["value"] is not None:
            env[str(item["name"])] = expand(str(item["value"]), env)
    return env


def argv_and_cwd(
    job: TrainingJob, role: str, spec: LaunchSpec, env: Mapping[str, str], job_workdir: str
) -> tuple[list[str], Path]:
    """The spec's command with ``$(VAR)`` expanded, and the directory it runs in (``workingDir``, relative to
    the submit dir)."""
    argv = [expand(part, env) for part in spec.argv]
    working = job.role(role).container.get("workingDir")
    cwd = Path(job_workdir) / expand(str(working), env) if working else Path(job_workdir)
    return argv, cwd


def inherited_environment() -> dict[str, str]:
    """What pods inherit from the control plane: its environment minus trainguard's own settings."""
    return {key: value for key, value in os.environ.items() if not key.startswith("TRAINGUARD_")}
