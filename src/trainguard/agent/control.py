"""Requests to a running agent, through a file the runtime writes (``--control FILE``).

The only request today is ``{"exit_code": N}``: end the pod with exit status N, as a process of the pod
really would (``trainguard chaos kill --exit-code N``). The agent stops the command's tree, reports
``exited`` with ``exit_code`` N and ``injected: true``, and exits N itself, so the pod's status is N on
every backend. The runtime writes the file atomically (temporary file + rename); the agent removes it once
read. A request it cannot read is reported on stderr and ignored: a bad request never harms the job.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path


def write_exit_request(path: Path, exit_code: int) -> None:
    """Ask the agent watching ``path`` to end the pod with ``exit_code`` (0-255)."""
    if not 0 <= exit_code <= 255:
        raise ValueError(f"exit code {exit_code}: a process can only end with 0-255")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(json.dumps({"exit_code": exit_code}))
    staging.replace(path)


def take_exit_request(path: Path) -> int | str | None:
    """The exit code asked for (and the request removed); None when there is none; a str saying why a
    request present was unreadable."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot read {path}: {error.strerror or error}"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    try:
        code = json.loads(text).get("exit_code")
    except (ValueError, AttributeError):
        return f"{path}: not a JSON object with exit_code"
    if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
        return f"{path}: exit_code must be a whole number 0-255, got {code!r}"
    return code
