"""Horovod's host-discovery script for a job: ``discover_hosts.sh`` printing one ``host:slots`` per line.

horovodrun runs the script again and again (every second); it is replaced atomically (write, fsync, rename),
so a run never sees half a file. Its first comment line carries the version, so an older update never
overwrites a newer one.

The controller lists the worker pods that run. Locally a pod can run before its host process (the stand-in
for sshd, ``trainguard.backends.local.hosts``) has published itself, and horovodrun would start a worker there
at once; so the script itself prints a host only once its host file is there, which takes no rewrite when it
appears. Without any host process in the job (no hosts directory) every listed pod is printed.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from trainguard.backends.local.hosts import host_file, hosts_dir

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
    text = script(version, hosts, hosts_dir(path.parent))
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    with open(temporary, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(temporary, 0o700)
    os.replace(temporary, path)
    return True


def script(version: int, hosts: Sequence[str], directory: Path) -> str:
    """The script printing each ``pod:slots`` of ``hosts`` whose host process is ready (see above)."""
    checks = "".join(
        f"ready {shlex.quote(str(host_file(directory, host.rpartition(':')[0] or host)))} "
        f"&& echo {shlex.quote(host)}\n"
        for host in hosts
    )
    return (
        f"#!/bin/sh\n# trainguard discovery version {version}\n"
        f'ready() {{ [ ! -d {shlex.quote(str(directory))} ] || [ -f "$1" ]; }}\n'
        f"{checks}exit 0\n"
    )
