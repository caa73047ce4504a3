"""What the operator keeps between reconciles (caches, node readiness, pending work), and the small facts about
pods every part of it uses. All of it can be lost: it is rebuilt from the cluster."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.k8s import manifests, metadata
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.delivery import AgentDelivery, node_mounts_image_volumes
from trainguard.backends.k8s.events import EventSender
from trainguard.backends.k8s.isolation import is_isolated
from trainguard.backends.k8s.observe import is_ours, node_ready, observed_pod
from trainguard.controller.apply import ErrorLog
from trainguard.controller.backend import ObservedNode, ObservedPhase, ObservedPod

Obj = dict[str, Any]
#: Requests one operator has in flight at once for the actions of its reconciles (pods, events): a job's
#: 8 pods and their events are created side by side rather than one round trip after another.
APPLY_CONCURRENCY = 16
#: Pod phases after which nothing runs in the pod any more.
ENDED = ("Succeeded", "Failed")


log = logging.getLogger(__name__)


@dataclass
class Shared:
    """What the operator keeps between reconciles (all of it can be lost: it is rebuilt from the cluster)."""

    kube: Kube
    pods: Cache
    nodes: Cache
    settings: manifests.PodSettings = field(default_factory=manifests.PodSettings)
    clock: Callable[[], float] = time.time
    #: This replica's name in the leader-election Lease, recorded on its Events (``reportingInstance``).
    identity: str = ""
    #: Pods that vanished after a disruption was seen on them, so that the fault keeps its cause
    #: (evicted, preempted) instead of reading as a forced deletion: the owning job's uid -> pod name -> last
    #: view. By uid, never by name: job ``train`` must not see the pods of ``train-big`` (or of an earlier
    #: ``train``).
    tombstones: dict[str, dict[str, ObservedPod]] = field(default_factory=dict)
    #: (namespace, job) -> action errors the controller should see.
    errors: dict[tuple[str, str], ErrorLog] = field(default_factory=dict)
    #: Jobs whose Service exists (by uid).
    services: set[str] = field(default_factory=set)
    #: Jobs whose rendezvous Service exists (by uid).
    rendezvous_services: set[str] = field(default_factory=set)
    #: Jobs whose rendezvous store writes are in flight (by uid), each with the look asked for meanwhile: the
    #: job as last seen and whether its pods were being launched (``store_pod.StorePod.tend``).
    store_requests: dict[str, tuple[TrainingJob, bool] | None] = field(default_factory=dict)
    #: Horovod jobs whose discovery ConfigMap exists (by uid).
    discovery_maps: set[str] = field(default_factory=set)
    #: Jobs whose ssh Secret exists (by uid).
    ssh_secrets: set[str] = field(default_factory=set)
    #: Jobs whose barrier's ServiceAccount, Role and RoleBinding exist (by uid).
    pod_access: set[str] = field(default_factory=set)
    #: Job uid -> the spec its PodGroup was last written with.
    pod_groups: dict[str, Obj] = field(default_factory=dict)
    #: PriorityClass name -> whether it exists, and when (monotonic seconds) that was looked up.
    priority_classes: dict[str, tuple[bool, float]] = field(default_factory=dict)
    #: Where the jobs' Events go (``EventSender``: one thread of their own, the batches do not wait for them);
    #: None: each is sent as its batch carries it out.
    events: EventSender | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(APPLY_CONCURRENCY, thread_name_prefix="apply")
    )
    #: Node name -> Ready, and the controller's view of all nodes, rebuilt only when a readiness changes
    #: (kwok and kubelets rewrite nodes every few seconds; a thousand of them per reconcile adds up).
    _ready: dict[str, bool] = field(default_factory=dict)
    _observed_nodes: tuple[ObservedNode, ...] | None = None
    #: Nodes isolated by fault tolerance checks (their taint, ``isolation.KEY``).
    _isolated: frozenset[str] = frozenset()
    #: Nodes whose status says they cannot mount image volumes (``delivery.supports_image_volume``).
    _no_image_volume: set[str] = field(default_factory=set)
    #: ``settings`` as ``pod_settings`` last resolved ``AUTO`` (made again, and logged, only when that changes).
    _resolved: manifests.PodSettings | None = None

    def pod_settings(self) -> manifests.PodSettings:
        """``settings`` with ``AgentDelivery.AUTO`` resolved: the image volume where every node known supports
        it (and some node is known), else the init container. Called for every pod created: it only compares,
        unless the answer changed."""
        if self.settings.agent_delivery is not AgentDelivery.AUTO:
            return self.settings
        with self.lock:
            image = bool(self._ready) and not self._no_image_volume
            how = AgentDelivery.IMAGE_VOLUME if image else AgentDelivery.INIT_CONTAINER
            resolved = self._resolved
            if resolved is not None and resolved.agent_delivery is how:
                return resolved
            resolved = self._resolved = dataclasses.replace(self.settings, agent_delivery=how)
            lacking = sorted(self._no_image_volume)[:3]
        log.info(
            "agent delivery: new pods get %s",
            "the agent as an image volume (every node mounts image volumes)"
            if image
            else f"the agent from an init container (nodes that do not mount image volumes: {lacking or 'none known'})",
        )
        return resolved

    def node_changed(self, node: Obj, now: Obj | None) -> bool:
        """Records a node's readiness and isolation (``now`` None: deleted); True when either changed. Also
        whether it can mount image volumes (``pod_settings``), which changes nothing for its pods."""
        name = node["metadata"]["name"]
        ready = now is not None and node_ready(now)
        isolated = now is not None and is_isolated(now)
        image = now is None or node_mounts_image_volumes(now)
        with self.lock:
            if image:
                self._no_image_volume.discard(name)
            else:
                self._no_image_volume.add(name)
            if now is not None and self._ready.get(name) == ready and (name in self._isolated) == isolated:
                return False
            if now is None and name not in self._ready:
                return False
            if now is None:
                del self._ready[name]
            else:
                self._ready[name] = ready
            if (name in self._isolated) != isolated:
                self._isolated = self._isolated ^ {name}
            self._observed_nodes = None
        return True

    def isolated_nodes(self) -> tuple[int, frozenset[str]]:
        """How many nodes the cluster has, and those isolated."""
        with self.lock:
            return len(self._ready), self._isolated

    def observed_nodes(self) -> tuple[ObservedNode, ...]:
        with self.lock:
            if self._observed_nodes is None:
                self._observed_nodes = tuple(ObservedNode(n, r, None) for n, r in sorted(self._ready.items()))
            return self._observed_nodes

    def node_is_ready(self, name: str) -> bool | None:
        with self.lock:
            return self._ready.get(name)

    def remember_disruption(self, pod: Obj) -> None:
        """A replica deleted after a disruption: its last view, kept for the job that owns it (by uid)."""
        uid = owner_uid(pod)
        if not is_ours(pod) or uid is None:
            return
        seen = observed_pod(pod)
        if seen.reason in ("Evicted", "Preempted", "DisruptionTarget"):
            with self.lock:
                self.tombstones.setdefault(uid, {})[seen.name] = ObservedPod(
                    name=seen.name,
                    role=seen.role,
                    index=seen.index,
                    generation=seen.generation,
                    phase=ObservedPhase.FAILED,
                    node=seen.node,
                    reason=seen.reason,
                )


def generation_of(pod: Obj) -> int:
    return int((pod["metadata"].get("labels") or {}).get(metadata.LABEL_GENERATION, 0))


def owner_uid(pod: Obj) -> str | None:
    """The uid of the job that made this pod (its controller owner reference; see ``metadata.owner_reference``),
    None when nothing controls it."""
    owners = pod["metadata"].get("ownerReferences") or []
    return next((str(o["uid"]) for o in owners if o.get("controller") and o.get("uid")), None)


def owned_by(pod: Obj, uid: str | None) -> bool:
    """Pods of an earlier job of the same name (not yet collected) are not this job's."""
    owners = pod["metadata"].get("ownerReferences") or []
    return uid is None or any(owner.get("uid") == uid for owner in owners)


def delete_pod(kube: Kube, namespace: str, name: str, uid: str, grace: int | None) -> None:
    """Delete this pod (by uid: never a newer one of the same name); gone already is fine."""
    try:
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", grace=grace, uid=uid)
    except ApiError as error:
        if error.status not in (404, 409):  # gone already, or a newer pod of that name
            raise
