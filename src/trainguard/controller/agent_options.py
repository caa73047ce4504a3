"""The agent's options for a pod of a job: the same on every backend (local processes, Kubernetes pods), which
render them into the pod's ``python -m trainguard.agent [options] -- CMD``. (Here, not in ``trainguard.agent``:
the agent itself runs from a stdlib-only bundle and knows nothing of the job model.)

Hang handling (the job's ``hang:`` block, or ModelArts' ``hang-retry``) turns on detection and restart in
place; the agent has one grace period, for stopping a hung command and for a SIGTERM: the hang block's when
hang handling is on, else the pod's ``terminationGracePeriodSeconds`` (Kubernetes' default: 30).
"""

from __future__ import annotations

from trainguard.api import TrainingJob

#: Kubernetes' default terminationGracePeriodSeconds.
DEFAULT_GRACE_SECONDS = 30.0


def agent_options(job: TrainingJob, role: str) -> list[str]:
    """Options for ``python -m trainguard.agent [options] -- CMD`` in a pod of ``role``."""
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
    return ["--grace", f"{grace_seconds(job, role):g}"]


def grace_seconds(job: TrainingJob, role: str) -> float:
    """``terminationGracePeriodSeconds`` of the role's pod template (Kubernetes' default: 30)."""
    spec = job.role(role).template.get("spec") or {}
    value = spec.get("terminationGracePeriodSeconds") if isinstance(spec, dict) else None
    return float(value) if isinstance(value, int | float) and value >= 0 else DEFAULT_GRACE_SECONDS
