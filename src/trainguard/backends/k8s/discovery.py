"""A Horovod job's host discovery: the ConfigMap ``<job>-discovery`` holding the script ``discover_hosts.sh``
that horovodrun runs to learn its hosts (one ``echo <host>:<slots>`` a host, rewritten on every
``UpdateDiscovery`` with a higher version), mounted into every pod at ``/etc/edl``."""

from __future__ import annotations

from trainguard.api import TrainingJob
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.metadata import Obj, object_meta
from trainguard.backends.k8s.services import network

DISCOVERY_KEY = "discover_hosts.sh"
DISCOVERY_DIR = "/etc/edl"
VOLUME = "trainguard-discovery"


def discovery_name(job: TrainingJob) -> str:
    return f"{job.name}-discovery"


def discovery_script(version: int, hosts: tuple[str, ...]) -> str:
    lines = "\n".join(f"echo {host}" for host in hosts)
    return f"#!/bin/sh\n# trainguard host discovery, version {version}\n{lines}\n"


def horovod_host(job: TrainingJob, name: str, observed: Obj | None) -> str:
    """How a Horovod launcher names the worker pod ``name`` (``observed``: that pod as last seen) in its host
    list: by the pod's IP, which is new with every pod, so that Horovod takes a replaced pod for a new host.
    By name it would not: horovodrun blacklists a host whose worker failed, for good unless it is given
    ``--blacklist-cooldown-range`` (CCE's command is not), and a replaced pod keeps its name here (CCE's
    operator names each pod anew). By its DNS name behind the job's Service where the IP is not known yet, or
    is its node's (``hostNetwork``: pods on one node would be one host)."""
    pod = observed or {}
    ip = (pod.get("status") or {}).get("podIP")
    if ip and not (pod.get("spec") or {}).get("hostNetwork"):
        return str(ip)
    return network(job).address(name)


def discovery_config_map(kind: JobKind, job: TrainingJob, version: int, hosts: tuple[str, ...]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            **object_meta(kind, job, discovery_name(job), {}),
            "annotations": {"trainguard.io/discovery-version": str(version)},
        },
        "data": {DISCOVERY_KEY: discovery_script(version, hosts)},
    }


def mount(job: TrainingJob, spec: Obj, container: Obj) -> None:
    """The job's discovery script at ``DISCOVERY_DIR`` in ``container`` (executable, read-only)."""
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {"name": VOLUME, "configMap": {"name": discovery_name(job), "defaultMode": 0o755}},
    ]
    container["volumeMounts"] = [
        *(container.get("volumeMounts") or []),
        {"name": VOLUME, "mountPath": DISCOVERY_DIR, "readOnly": True},
    ]
