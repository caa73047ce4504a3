"""What a benchmark keeps of a run: its figures with the commit, the machine and its load, as one JSON file
under ``benchmarks/results/`` (or the directory given), so that a table in the docs can be checked."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).with_name("results")
#: The ``src`` of the trainguard a benchmark that starts it as a process measures, where not this tree's
#: (``benchmarks/against.py --same-script`` sets it for each commit).
ENV_UNDER_TEST = "TRAINGUARD_UNDER_TEST"


def machine() -> dict[str, Any]:
    """The commit (``$TRAINGUARD_COMMIT`` where the tree is not a git checkout, e.g. a copy on a GPU machine),
    the machine and its load now."""
    described: dict[str, Any] = {
        "commit": os.environ.get("TRAINGUARD_COMMIT", ""),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "load_average": [round(load, 2) for load in os.getloadavg()],
    }
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        if not described["commit"]:
            head = ["git", "rev-parse", "--short", "HEAD"]
            described["commit"] = subprocess.run(
                head, capture_output=True, text=True, check=True, cwd=Path(__file__).parent
            ).stdout.strip()
            dirty = ["git", "status", "--porcelain", "--untracked-files=no"]
            if subprocess.run(
                dirty, capture_output=True, text=True, check=True, cwd=Path(__file__).parent
            ).stdout:
                described["commit"] += "+changes"
    with contextlib.suppress(ImportError):
        import torch

        described["torch"] = torch.__version__
        if torch.cuda.is_available():
            described["gpu"] = torch.cuda.get_device_name(0)
    return described


def keep(name: str, results: dict[str, Any], directory: str | os.PathLike[str] | None = None) -> Path:
    """Write ``results`` as ``<name>-<time>.json`` under ``directory`` (default ``benchmarks/results``)."""
    out = Path(directory) if directory is not None else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results) + "\n")
    return path
