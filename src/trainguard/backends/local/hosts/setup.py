"""What a pod of a local Horovod job gets from the runtime: our ``ssh`` first on its PATH, the directory where
host processes publish themselves, and the host-discovery script; and no host file of an earlier incarnation.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from trainguard.backends.local.hosts import HOSTS_DIR_ENV, host_file, hosts_dir

DISCOVERY_ENV = "TRAINGUARD_DISCOVERY_SCRIPT"


def pod_environment(
    job_dir: Path, discovery_script: Path, pod: str, base: Mapping[str, str]
) -> dict[str, str]:
    """The variables a Horovod pod gets on top of every pod's, after clearing what an earlier launch of
    ``pod`` left (its host file: until the new host publishes itself, nobody may connect to the old port)."""
    directory = hosts_dir(job_dir)
    host_file(directory, pod).unlink(missing_ok=True)
    bin_dir = job_dir / "bin"
    _write_ssh(bin_dir / "ssh")
    path = base.get("PATH", os.defpath)
    return {
        DISCOVERY_ENV: str(discovery_script),
        HOSTS_DIR_ENV: str(directory),
        "PATH": f"{bin_dir}{os.pathsep}{path}",
    }


def _write_ssh(path: Path) -> None:
    text = (
        "#!/bin/sh\n"
        "# trainguard: ssh for the pods of a local Horovod job; it reaches a trainer pod's host process\n"
        "# (python -m trainguard.backends.local.hosts), see docs/horovod.md\n"
        f'exec {shlex.quote(sys.executable)} -m trainguard.backends.local.hosts ssh "$@"\n'
    )
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text)
    os.chmod(temporary, 0o700)
    os.replace(temporary, path)
