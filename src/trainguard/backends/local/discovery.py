"""Horovod's host-discovery script for a job: ``discover_hosts.sh`` printing one ``host:slots`` per line.

horovodrun runs the script again and again; it is replaced atomically (write, fsync, rename), so a run never
sees half a file. Its first comment line carries the version, so an older update never overwrites a newer one.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

_VERSION = re.compile(r"^# trainguard discovery version (\d+)$", re.MULTILINE)


def current_version(path: Path) -> int:
    try:
        match = _VERSION.search(path.read_text())
    except OSError:
        return 0
    return int(match.group(1)) if match else 0


def write(path: Path, version: int, hosts: Sequence[str]) -> bool:
    """Write the script for ``hosts`` unless a newer (or the same) version is there; True when written."""
    if current_version(path) >= version:
        return False
    lines = "".join(f"echo {shlex.quote(host)}\n" for host in hosts)
    text = f"#!/bin/sh\n# trainguard discovery version {version}\n{lines}"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    with open(temporary, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(temporary, 0o700)
    os.replace(temporary, path)
    return True
