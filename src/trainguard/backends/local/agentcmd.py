"""The command line that starts a pod: ``python -m trainguard.agent [options] --report FILE -- CMD...``."""

from __future__ import annotations

import sys
from pathlib import Path

from trainguard.api import TrainingJob
from trainguard.controller.agent_options import agent_options


def agent_argv(
    job: TrainingJob,
    role: str,
    report: Path,
    command: list[str],
    control: Path | None = None,
    nudge: Path | None = None,
) -> list[str]:
    """Run ``command`` under the agent, with the job's hang settings (restarts in place when enabled) and the
    files the runtime speaks to it through (``control``: exit requests; ``nudge``: another pod failed)."""
    options = ["--report", str(report)]
    if control is not None:
        options += ["--control", str(control)]
    if nudge is not None:
        options += ["--nudge-file", str(nudge)]
    return [sys.executable, "-m", "trainguard.agent", *options, *agent_options(job, role), "--", *command]
