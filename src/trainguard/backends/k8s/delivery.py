"""How trainguard's agent gets into a pod whose image knows nothing of trainguard.

The agent's image (and the operator's) holds the agent (``IMAGE_AGENT_ROOT``: ``bin/trainguard-entry``, a static
program, and ``lib/``, the agent's modules, standard library only). Every pod finds it at ``AGENT_ROOT`` and runs its command
through ``ENTRY``, in one of two ways (``AgentDelivery``):

- an **image volume**: the agent's image mounted read-only at ``AGENT_ROOT`` (Kubernetes' ``image`` volume
  source, beta and on by default from 1.35): nothing is copied and the pod has no container of ours but its own.
  The kubelet and the container runtime must support it (``supports_image_volume``);
- an **init container**: an emptyDir at ``AGENT_ROOT`` that an init container, in the agent's image, fills
  before the pod's own init containers run. It works on every cluster, at the cost of one more container in
  every pod (its spec, its status, its start).

``AUTO`` (the operator's default) takes the image volume where every node the operator knows supports it, and the
init container otherwise (``trainguard.backends.k8s.shared.Shared.pod_settings``).
"""

from __future__ import annotations

import re
from enum import Enum

from trainguard._version import __version__
from trainguard.backends.k8s.metadata import Obj

#: Where the agent's image (and the operator's) keeps what pods need (``deploy/Dockerfile``).
IMAGE_AGENT_ROOT = "/opt/trainguard"
#: Where every pod finds it.
AGENT_ROOT = "/trainguard"
AGENT_VOLUME = "trainguard-agent"
#: The static program the pod's commands run through (``entry/``): it needs nothing of the image. Where the init
#: container copied it; in an image volume the agent's image is mounted whole at ``AGENT_ROOT`` (containerd
#: 2.1 mounts an image volume whole: it takes no ``subPath``), so it lies under the image's ``IMAGE_AGENT_ROOT``
#: there (``entry``). Either way the entry finds the agent's modules beside it (``../lib``).
ENTRY = f"{AGENT_ROOT}/bin/trainguard-entry"
IMAGE_VOLUME_ENTRY = f"{AGENT_ROOT}{IMAGE_AGENT_ROOT}/bin/trainguard-entry"
#: The init container that copies the agent in (``AgentDelivery.INIT_CONTAINER``). The image's python3 is looked
#: for by ``trainguard-entry run`` itself, in the container; a pod made by an older operator had a second init
#: container, ``PROBE_CONTAINER``, for that, whose termination message the operator still reads.
INSTALL_CONTAINER = "trainguard-install"
PROBE_CONTAINER = "trainguard-probe"
#: The image whose ``IMAGE_AGENT_ROOT`` the pods get: the agent's own (``deploy/Dockerfile``'s stage ``agent``: the
#: entry and the agent's modules, nothing else, a few MB). The operator's image has the same files there.
DEFAULT_AGENT_IMAGE = f"ghcr.io/trainguard/agent:{__version__}"
_INIT_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}}
#: The oldest kubelet whose image volumes are on by default, and the oldest runtimes that mount them.
IMAGE_VOLUME_KUBELET = (1, 35)
IMAGE_VOLUME_RUNTIMES = {"containerd": (2, 1), "cri-o": (1, 31)}
_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


class AgentDelivery(str, Enum):
    AUTO = "auto"
    IMAGE_VOLUME = "image-volume"
    INIT_CONTAINER = "init-container"


def words(how: AgentDelivery) -> str:
    """What the operator's log says of ``how``."""
    if how is AgentDelivery.IMAGE_VOLUME:
        return "the agent image mounted into every pod as an image volume (--agent-delivery)"
    if how is AgentDelivery.INIT_CONTAINER:
        return "the agent copied into every pod by an init container (--agent-delivery)"
    return (
        "the agent image mounted into every pod as an image volume while every node's kubelet (1.35 or later) and "
        "runtime (containerd 2.1 or CRI-O 1.31 or later) mount them, else copied in by an init container "
        "(--agent-delivery auto)"
    )


def _version(text: str) -> tuple[int, int] | None:
    match = _VERSION.match(text.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def supports_image_volume(kubelet_version: str, runtime_version: str) -> bool:
    """Whether a node mounts image volumes, as its status' ``nodeInfo`` says: a kubelet of 1.35 or later (where
    they are on by default) and containerd 2.1 or CRI-O 1.31 or later (``containerd://2.1.4``). Anything else
    (older, unknown, unparsable) is taken as no."""
    kubelet = _version(kubelet_version)
    runtime, _, version = runtime_version.partition("://")
    oldest = IMAGE_VOLUME_RUNTIMES.get(runtime)
    have = _version(version)
    return (
        kubelet is not None
        and kubelet >= IMAGE_VOLUME_KUBELET
        and oldest is not None
        and have is not None
        and (have >= oldest)
    )


def entry(how: AgentDelivery) -> str:
    """The entry program's path in a pod whose agent is delivered ``how``."""
    return IMAGE_VOLUME_ENTRY if how is AgentDelivery.IMAGE_VOLUME else ENTRY


def node_mounts_image_volumes(node: Obj) -> bool:
    """``supports_image_volume`` of a Node object, as its status' ``nodeInfo`` says."""
    info = (node.get("status") or {}).get("nodeInfo") or {}
    return supports_image_volume(
        str(info.get("kubeletVersion") or ""), str(info.get("containerRuntimeVersion") or "")
    )


def deliver_agent(spec: Obj, container: Obj, image: str, how: AgentDelivery) -> None:
    """The agent at ``AGENT_ROOT`` for ``container``: ``image`` mounted there read-only (``IMAGE_VOLUME``), or an
    emptyDir there filled by an init container before the pod's own init containers run (any other); the
    container's command runs ``entry(how)``. The entry writes what it found of the image's python where it can (``AGENT_ROOT`` where
    it is an emptyDir, else the container's temporary directory)."""
    if how is AgentDelivery.IMAGE_VOLUME:
        volume: Obj = {"name": AGENT_VOLUME, "image": {"reference": image, "pullPolicy": "IfNotPresent"}}
        mount: Obj = {"name": AGENT_VOLUME, "mountPath": AGENT_ROOT, "readOnly": True}
        spec["volumes"] = [*(spec.get("volumes") or []), volume]
        container["volumeMounts"] = [*(container.get("volumeMounts") or []), mount]
        return
    mount = {"name": AGENT_VOLUME, "mountPath": AGENT_ROOT}
    spec["volumes"] = [*(spec.get("volumes") or []), {"name": AGENT_VOLUME, "emptyDir": {}}]
    install: Obj = {
        "name": INSTALL_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [f"{IMAGE_AGENT_ROOT}/bin/trainguard-entry", "install", AGENT_ROOT],
        "volumeMounts": [mount],
        "resources": _INIT_RESOURCES,
    }
    spec["initContainers"] = [install, *(spec.get("initContainers") or [])]
    container["volumeMounts"] = [*(container.get("volumeMounts") or []), dict(mount)]
