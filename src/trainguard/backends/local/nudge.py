"""Carrying out the controller's ``NudgeSurvivors`` on the local runtime (``trainguard.controller.nudges`` says
why and when) as the operator does on Kubernetes: through each surviving pod's agent. Every pod's agent polls
a nudge file of its launch (``Home.nudge_file``, given as ``--nudge-file`` and made empty before the agent
starts, so that the first nudge is a change); ``write`` puts ``<token> <failure time>`` there, and the agent
SIGKILLs the workers of its command started before the failure, which torchrun restarts into a new round
(``trainguard.agent.nudge``). The agent also leaves those workers' ends out of its report, so nothing about a
nudge lives in the control plane: one that is killed right after writing the file loses nothing.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from trainguard.agent.nudge import format_nudge


def create(path: Path) -> None:
    """An empty nudge file (no failure yet), replacing whatever an earlier try of the launch left there."""
    _replace(path, "")


def write(path: Path, token: str, failed_at: float) -> None:
    """Tell the pod's agent about the failure ``token`` at ``failed_at`` (epoch seconds), atomically: the agent
    reads the old line or the new one, never half of it."""
    _replace(path, format_nudge(token, failed_at))


def _replace(path: Path, text: str) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(staging, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        raise
