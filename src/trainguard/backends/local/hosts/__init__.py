"""Stand-ins for sshd and ssh, so that a Horovod launcher can start workers in its trainer pods on one machine.

On Kubernetes each trainer pod runs a real sshd and horovodrun reaches it with ssh; the local runtime's pods are
processes on one machine, where sshd cannot run once per pod (one port 22, one host). So, locally:

- each trainer pod runs ``python -m trainguard.backends.local.hosts`` (``serve``), the *host*: it listens on a
  loopback port and publishes it, with a secret token, in ``<hosts dir>/<pod>.json`` (owner-only);
- the launcher pod finds an ``ssh`` of ours first on its PATH (``ssh`` subcommand): horovodrun's
  ``ssh [options] HOST COMMAND`` connects to HOST's host process, which runs COMMAND as its own child (in
  the pod's process group: killing the pod kills the Horovod worker) and streams its output and exit code
  back; ssh exits with that code, or 255 as OpenSSH does when the host cannot be reached or the connection
  drops. When the connection drops the host kills the command, so a worker never outlives its ssh.

This fakes ssh, not Horovod: horovodrun, its elastic driver and Gloo run unchanged (docs/horovod.md).
"""

from __future__ import annotations

from pathlib import Path

#: The directory of the host files of a job's pods (the local runtime sets it for Horovod jobs).
HOSTS_DIR_ENV = "TRAINGUARD_HOSTS_DIR"


def host_file(hosts_dir: Path, host: str) -> Path:
    """Where the host process of pod ``host`` publishes its port and token."""
    return hosts_dir / f"{host}.json"


def hosts_dir(job_dir: Path) -> Path:
    """Where the host processes of a job's pods publish themselves."""
    return job_dir / "hosts"
