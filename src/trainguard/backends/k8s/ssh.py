"""CCE's ``plugin.ssh``: a key pair of the job's own, so that ``horovodrun`` in the launcher reaches ``sshd`` in
the trainers, as Kubeflow's MPI operator does it.

For a job whose ``plugin`` names ``ssh`` the operator creates the Secret ``<job>-ssh`` (owned by the job, so
deleted with it) holding a fresh Ed25519 key pair, the public key as ``authorized_keys``, and a client
``config`` that trusts the job's hosts without asking (their keys are made fresh with every pod, so there is
nothing to pin), logs in as the same user, and gives up on a host that stops answering (``ServerAliveInterval``):
horovodrun learns that a worker failed only when its ssh ends, and an ssh to a dead node would otherwise wait
for TCP keepalive, two hours. Every pod of the job gets it at ``/root/.ssh`` (mode 0600), in
its first container, unless its template mounts something there already. A Horovod host's pod is Ready once
its sshd answers (``readiness_probe``).
"""

from __future__ import annotations

import base64
from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.metadata import object_meta

Obj = dict[str, Any]

MOUNT = "/root/.ssh"
VOLUME = "trainguard-ssh"
#: Secret key -> file name under ``MOUNT``.
FILES = {
    "ssh-privatekey": "id_ed25519",
    "ssh-publickey": "id_ed25519.pub",
    "authorized_keys": "authorized_keys",
    "config": "config",
}

#: A host that does not answer: a new connection gives up after CONNECT_TIMEOUT seconds, an open one after
#: ALIVE_COUNT unanswered probes ALIVE_INTERVAL seconds apart (a host that is up answers even while its worker waits).
CONNECT_TIMEOUT = 10
ALIVE_INTERVAL = 5
ALIVE_COUNT = 3
#: Where horovodrun reaches a host's sshd (its ``--ssh-port`` default).
SSH_PORT = 22
#: How often a Horovod host's kubelet tries its sshd (the job's rendezvous store is probed as often).
READY_PERIOD = 2


def wants_ssh(job: TrainingJob) -> bool:
    return isinstance(job.spec.plugin, dict) and "ssh" in job.spec.plugin


def secret_name(job: TrainingJob) -> str:
    return f"{job.name}-ssh"


def client_config(job: TrainingJob) -> str:
    return (
        "# trainguard: the hosts of this job (their host keys are new with every pod)\n"
        "Host *\n"
        "    IdentityFile ~/.ssh/id_ed25519\n"
        "    StrictHostKeyChecking no\n"
        "    UserKnownHostsFile /dev/null\n"
        "    LogLevel ERROR\n"
        f"    ConnectTimeout {CONNECT_TIMEOUT}\n"
        f"    ServerAliveInterval {ALIVE_INTERVAL}\n"
        f"    ServerAliveCountMax {ALIVE_COUNT}\n"
    )


def key_pair(comment: str) -> tuple[str, str]:
    """A fresh Ed25519 key pair: the private key in OpenSSH's format, and the public key's line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return private, f"{public.decode()} {comment}\n"


def secret_data(job: TrainingJob, private: str, public: str) -> dict[str, str]:
    """The Secret's ``data`` (base64), by key."""
    files = {
        "ssh-privatekey": private,
        "ssh-publickey": public,
        "authorized_keys": public,
        "config": client_config(job),
    }
    return {key: base64.b64encode(text.encode()).decode() for key, text in files.items()}


def mount(spec: Obj, container: Obj, job: TrainingJob) -> None:
    """The job's key pair at ``MOUNT`` in ``container`` (not where the template mounts something already)."""
    if any(m.get("mountPath", "").rstrip("/") == MOUNT for m in container.get("volumeMounts") or []):
        return
    items = [{"key": key, "path": path} for key, path in FILES.items()]
    source = {"secretName": secret_name(job), "defaultMode": 0o600, "items": items}
    spec["volumes"] = [*(spec.get("volumes") or []), {"name": VOLUME, "secret": source}]
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": VOLUME, "mountPath": MOUNT, "readOnly": True},
    ]


def readiness_probe(container: Obj) -> None:
    """A Horovod host's pod is Ready once its sshd accepts connections (a TCP probe of ``SSH_PORT``), unless
    its container has a readiness probe of its own. The controller lists a host for horovodrun only once its
    pod is Ready (``trainguard.controller.scaling.update_discovery``): horovodrun blacklists for good a host it
    could not start a worker on, and a container counts as running as soon as its command started, before
    ``/usr/sbin/sshd`` listens."""
    container.setdefault("readinessProbe", {"tcpSocket": {"port": SSH_PORT}, "periodSeconds": READY_PERIOD})


def secret(kind: JobKind, job: TrainingJob) -> Obj:
    """The job's Secret, with a fresh key pair."""
    private, public = key_pair(f"trainguard-{job.metadata.namespace}-{job.name}")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": object_meta(kind, job, secret_name(job), {}),
        "data": secret_data(job, private, public),
    }
