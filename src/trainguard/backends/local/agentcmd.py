"""The command line that starts a pod: ``python -m trainguard.agent [options] --report FILE -- CMD...``."""

from __future__ import annotations

import sys
from pathlib import Path

from trainguard.api import TrainingJob


def agent_argv(
    job: TrainingJob, role: str, report: Path, command: list[str], control: Path | None = None
) -> list[str]:
    """Run ``command`` under the agent, with the job's hang settings (restarts in place when enabled).

    The agent has one grace period, for stopping a hung command and for a SIGTERM: the hang block's when
    hang handling is on, else the pod's ``terminationGracePeriodSeconds``.
    """
    hang = job.spec.hang
    options = ["--report", str(report)]
    if control is not None:
        options += ["--control", str(control)]
    if hang is not None and hang.enabled:
        options += [
            "--hang-timeout",
            f"{hang.timeout_seconds:g}",
            "--max-consecutive",
            str(hang.max_consecutive),
            "--signals",
            ",".join(signal.value for signal in hang.signals),
            "--grace",
            f"{hang.grace_period_seconds:g}",
        ]
    else:
        options += ["--grace", f"{grace_seconds(job, role):g}"]
    return [sys.executable, "-m", "trainguard.agent", *options, "--", *command]


def grace_seconds(job: TrainingJob, role: str) -> float:
    """``terminationGracePeriodSeconds`` of the role's pod template (Kubernetes' default: 30)."""
    spec = job.role(role).template.get("spec") or {}
    value = spec.get("terminationGracePeriodSeconds") if isinstance(spec, dict) else None
    return float(value) if isinstance(value, int | float) and value >= 0 else 30.0
