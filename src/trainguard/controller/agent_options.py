"""The agent's options for a pod of a job: the same on every backend (local processes, Kubernetes pods), which
render them into the pod's ``python -m trainguard.agent [options] -- CMD``. (Here, not in ``trainguard.agent``:
the agent itself runs from a stdlib-only bundle and knows nothing of the job model.)

Hang handling (the job's ``hang:`` block, or ModelArts' ``hang-retry``) turns on detection and restart in
place; the agent has one grace period, for stopping a hung command and for a SIGTERM: the hang block's when
hang handling is on, else the pod's ``terminationGracePeriodSeconds`` (Kubernetes' default: 30).

With hang handling off, a pod whose containers request GPUs (``nvidia.com/gpu``) gets detection only
(``--report-only``), as ModelArts detects suspension on every GPU job: the job's hang timeout (default 1800 s),
the signals in ModelArts' order where the agent reads them (the tree's I/O, then the CPU with the devices'
activity); the agent reports a suspected hang and never stops the command.

Where the backend's lost pods may run on unseen (``Observed.fencing``: the operator's), every pod's agent gets
``--fence-after`` its bound, derived from the backend's one fencing setting (``policy.fencing``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainguard.api import TrainingJob
from trainguard.api.model import HangPolicy
from trainguard.policy.fencing import Fencing

#: Kubernetes' default terminationGracePeriodSeconds.
DEFAULT_GRACE_SECONDS = 30.0
#: The extended resource of NVIDIA's device plugin.
GPU_RESOURCE = "nvidia.com/gpu"
#: Detection only's signals, in ModelArts' order: the process's I/O, then the devices (read with the CPU).
DETECT_ONLY_SIGNALS = "io,cpu"


def agent_options(job: TrainingJob, role: str, fencing: Fencing | None = None) -> list[str]:
    """Options for ``python -m trainguard.agent [options] -- CMD`` in a pod of ``role``."""
    fence = ["--fence-after", f"{fencing.agent_bound:g}"] if fencing is not None else []
    return [*_hang_options(job, role), *fence]


def _hang_options(job: TrainingJob, role: str) -> list[str]:
    hang = job.spec.hang
    if hang is not None and hang.enabled:
        return [
            "--hang-timeout",
            f"{hang.timeout_seconds:g}",
            "--max-consecutive",
            str(hang.max_consecutive),
            "--signals",
            ",".join(signal.value for signal in hang.signals),
            "--grace",
            f"{hang.grace_period_seconds:g}",
        ]
    grace = ["--grace", f"{grace_seconds(job, role):g}"]
    if requests_gpus(job.role(role).template):
        timeout = (hang or HangPolicy()).timeout_seconds
        return ["--hang-timeout", f"{timeout:g}", "--signals", DETECT_ONLY_SIGNALS, "--report-only", *grace]
    return grace


def requests_gpus(template: Mapping[str, Any]) -> bool:
    """Whether a container (init containers too) of the pod template asks for a GPU, in its limits or its
    requests (a quantity other than 0)."""
    return gpu_count(template) > 0


def gpu_count(template: Mapping[str, Any]) -> int:
    """The GPUs (``nvidia.com/gpu``) the pod template's containers ask for, the most any one asks in its limits
    or requests (init containers too); 0 where none does or a quantity is not a whole number."""
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return 0
    containers = [
        container
        for key in ("containers", "initContainers")
        for container in (spec.get(key) or [])
        if isinstance(container, Mapping)
    ]
    most = 0
    for container in containers:
        resources = container.get("resources")
        if not isinstance(resources, Mapping):
            continue
        for kind in ("limits", "requests"):
            amounts = resources.get(kind)
            if not isinstance(amounts, Mapping):
                continue
            text = str(amounts.get(GPU_RESOURCE, "0")).strip() or "0"
            most = max(most, int(text) if text.isdigit() else 1)
    return most


def grace_seconds(job: TrainingJob, role: str) -> float:
    """``terminationGracePeriodSeconds`` of the role's pod template (Kubernetes' default: 30)."""
    spec = job.role(role).template.get("spec") or {}
    value = spec.get("terminationGracePeriodSeconds") if isinstance(spec, dict) else None
    return float(value) if isinstance(value, int | float) and value >= 0 else DEFAULT_GRACE_SECONDS
