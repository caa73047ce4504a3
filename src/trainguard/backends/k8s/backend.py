"""The controller's backend interface (``trainguard.controller.backend``) over the Kubernetes API, for one job.

``observe`` reads the watched caches (pods of the job, all nodes); ``apply`` writes to the API server.
Idempotency comes from the cluster itself: a pod's name is unique, so creating an incarnation that exists
answers 409 (done already); deleting names the pod's uid, so an incarnation that is gone is not touched
twice; an event's name is derived from its key; the status is written with the resourceVersion it was read
at, and a conflict (someone else wrote first) stops the batch: the job is read again and decided again.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.k8s import manifests
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.observe import is_ours, node_ready, observed_pod, parse_time
from trainguard.controller.backend import (
    Action,
    ActionError,
    EmitEvent,
    LaunchPod,
    NudgeSurvivors,
    Observed,
    ObservedNode,
    ObservedPhase,
    ObservedPod,
    RestartInPlace,
    TerminatePod,
    UpdateDiscovery,
    WriteStatus,
)
from trainguard.controller.status import JobStatus

Obj = dict[str, Any]
log = logging.getLogger(__name__)
COMPONENT = "trainguard-operator"
_MAX_ERRORS = 50
#: Requests one operator has in flight at once for the actions of its reconciles (pods, events): a job's
#: 8 pods and their events are created side by side rather than one round trip after another.
APPLY_CONCURRENCY = 16


class StatusConflict(Exception):
    """The job's status changed since it was read: read it again and decide again."""


@dataclass
class Shared:
    """What the operator keeps between reconciles (all of it can be lost: it is rebuilt from the cluster)."""

    kube: Kube
    pods: Cache
    nodes: Cache
    scheduler: str | None = None
    clock: Callable[[], float] = time.time
    #: This replica's name in the leader-election Lease, recorded on its Events (``reportingInstance``).
    identity: str = ""
    #: Pods that vanished after a disruption was seen on them, so that the fault keeps its cause
    #: (evicted, preempted) instead of reading as a forced deletion: pod name -> last view.
    tombstones: dict[tuple[str, str], ObservedPod] = field(default_factory=dict)
    #: (namespace, job) -> action errors the controller should see.
    errors: dict[tuple[str, str], list[ActionError]] = field(default_factory=dict)
    #: Launches waiting for the previous incarnation of their pod to be gone: (namespace, pod) -> body.
    pending_launches: dict[tuple[str, str], Obj] = field(default_factory=dict)
    #: Jobs whose Service exists (by uid).
    services: set[str] = field(default_factory=set)
    #: Jobs whose rendezvous Service exists (by uid).
    rendezvous_services: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(APPLY_CONCURRENCY, thread_name_prefix="apply")
    )
    #: Node name -> Ready, and the controller's view of all nodes, rebuilt only when a readiness changes
    #: (kwok and kubelets rewrite nodes every few seconds; a thousand of them per reconcile adds up).
    _ready: dict[str, bool] = field(default_factory=dict)
    _observed_nodes: tuple[ObservedNode, ...] | None = None

    def node_changed(self, node: Obj, now: Obj | None) -> bool:
        """Records a node's readiness (``now`` None: deleted); True when it changed."""
        name = node["metadata"]["name"]
        ready = now is not None and node_ready(now)
        with self.lock:
            if now is not None and self._ready.get(name) == ready:
                return False
            if now is None and name not in self._ready:
                return False
            if now is None:
                del self._ready[name]
            else:
                self._ready[name] = ready
            self._observed_nodes = None
        return True

    def observed_nodes(self) -> tuple[ObservedNode, ...]:
        with self.lock:
            if self._observed_nodes is None:
                self._observed_nodes = tuple(ObservedNode(n, r, None) for n, r in sorted(self._ready.items()))
            return self._observed_nodes

    def node_is_ready(self, name: str) -> bool | None:
        with self.lock:
            return self._ready.get(name)

    def remember_disruption(self, pod: Obj) -> None:
        if not is_ours(pod):
            return
        seen = observed_pod(pod)
        if seen.reason in ("Evicted", "Preempted", "DisruptionTarget"):
            key = (pod["metadata"]["namespace"], seen.name)
            with self.lock:
                self.tombstones[key] = ObservedPod(
                    name=seen.name,
                    role=seen.role,
                    index=seen.index,
                    generation=seen.generation,
                    phase=ObservedPhase.FAILED,
                    node=seen.node,
                    reason=seen.reason,
                )


class JobBackend:
    """One job's view and hands, for one reconcile (``obj`` is the custom resource as read)."""

    def __init__(self, shared: Shared, kind: JobKind, obj: Obj) -> None:
        self.shared = shared
        self.kube = shared.kube
        self.kind = kind
        self.obj = obj
        self.namespace = obj["metadata"]["namespace"]
        self.name = obj["metadata"]["name"]
        self.written: JobStatus | None = None

    # ---- observe -----------------------------------------------------------------------------------

    def observe(self, job: TrainingJob) -> Observed:
        pods = [
            p
            for p in self.shared.pods.select(self.namespace, {manifests.LABEL_JOB: job.name})
            if is_ours(p) and _owned_by(p, job.metadata.uid)
        ]
        seen = [observed_pod(p) for p in pods]
        names = {p.name for p in seen}
        # A vanished pod's last view is shown until the controller has moved its slot past that incarnation.
        decided = {
            p.get("name"): p.get("generation", 1) for p in (self.obj.get("status") or {}).get("pods", [])
        }
        with self.shared.lock:
            for (namespace, name), tomb in list(self.shared.tombstones.items()):
                if namespace != self.namespace or not name.startswith(job.name + "-"):
                    continue
                if decided.get(name, 1) > tomb.generation:
                    del self.shared.tombstones[(namespace, name)]
                elif name not in names:
                    seen.append(tomb)
        self._clean_stuck(pods)
        self._retry_launches(job, names)
        with self.shared.lock:
            errors = tuple(self.shared.errors.get((self.namespace, self.name), ()))
        return Observed(
            pods=tuple(sorted(seen, key=lambda p: p.name)),
            nodes=self.shared.observed_nodes(),
            errors=errors,
            network=manifests.network(job),
        )

    def _clean_stuck(self, pods: list[Obj]) -> None:
        """Pods being deleted on a node that is not Ready never finish (no kubelet confirms): remove them."""
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName") or ""
            if pod["metadata"].get("deletionTimestamp") and self.shared.node_is_ready(node) is False:
                self._delete_pod(pod["metadata"]["name"], pod["metadata"]["uid"], grace=0)

    def _retry_launches(self, job: TrainingJob, present: set[str]) -> None:
        with self.shared.lock:
            due = [
                (name, body)
                for (namespace, name), body in self.shared.pending_launches.items()
                if namespace == self.namespace and name.startswith(job.name + "-") and name not in present
            ]
        for name, body in due:
            try:
                self.shared.pods.put(self.kube.create(f"/api/v1/namespaces/{self.namespace}/pods", body))
            except ApiError as error:
                if error.status == 409:
                    continue  # not gone yet
                log.warning("%s/%s: launch of %s: %s", self.namespace, self.name, name, error)
            with self.shared.lock:
                self.shared.pending_launches.pop((self.namespace, name), None)

    # ---- apply -------------------------------------------------------------------------------------

    def apply(self, job: TrainingJob, actions: Sequence[Action]) -> None:
        """In order around the status writes; between two writes, the actions on different pods (and
        every event) go out side by side, the actions on one pod one after the other."""
        if any(isinstance(a, LaunchPod) for a in actions):
            # The store first, so that the agents of the first pods find it as soon as they start.
            self._tend_rendezvous_logged(job, launching=True)
        between: list[Action] = []
        for action in actions:
            if isinstance(action, WriteStatus):
                self._apply_side_by_side(job, between)
                between = []
                # A conflict (StatusConflict) stops the batch: read again, decide again.
                self._try(action, partial(self._apply_one, job, action))
            else:
                between.append(action)
        self._apply_side_by_side(job, between)
        self._tend_rendezvous_logged(job)

    def _apply_side_by_side(self, job: TrainingJob, actions: list[Action]) -> None:
        if any(isinstance(a, LaunchPod) for a in actions):
            self._try(actions[0], partial(self._ensure_service, job))
        chains: dict[object, list[Action]] = {}
        for number, action in enumerate(actions):
            if isinstance(action, (LaunchPod, TerminatePod, RestartInPlace)):
                chains.setdefault(("pod", action.pod), []).append(action)
            elif isinstance(action, UpdateDiscovery):
                chains.setdefault("discovery", []).append(action)
            else:
                chains[number] = [action]
        if len(chains) <= 1:
            for chain in chains.values():
                self._run_chain(job, chain)
            return
        futures: list[Future[None]] = [
            self.shared.pool.submit(self._run_chain, job, chain) for chain in chains.values()
        ]
        for future in futures:
            future.result()  # an unexpected error surfaces here (the reconcile is retried)

    def _run_chain(self, job: TrainingJob, chain: list[Action]) -> None:
        for action in chain:
            self._try(action, partial(self._apply_one, job, action))

    def _try(self, action: Action, call: Callable[[], None]) -> None:
        try:
            call()
        except ApiError as error:
            log.warning("%s/%s: %s failed: %s", self.namespace, self.name, action.key, error)
            with self.shared.lock:
                errors = self.shared.errors.setdefault((self.namespace, self.name), [])
                errors.append(ActionError(action.key, error.message, self.shared.clock()))
                del errors[:-_MAX_ERRORS]

    def _apply_one(self, job: TrainingJob, action: Action) -> None:
        if isinstance(action, WriteStatus):
            self._write_status(job, action.status)
        elif isinstance(action, LaunchPod):
            self._launch(job, action)
        elif isinstance(action, TerminatePod):
            self._terminate(action)
        elif isinstance(action, RestartInPlace):
            self._restart_in_place(action)
        elif isinstance(action, NudgeSurvivors):
            self._nudge(action)
        elif isinstance(action, UpdateDiscovery):
            self._discovery(job, action)
        elif isinstance(action, EmitEvent):
            self._event(job, action)

    def _write_status(self, job: TrainingJob, status: JobStatus) -> None:
        body = {
            "apiVersion": self.kind.api_version,
            "kind": self.kind.kind,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": self.obj["metadata"]["resourceVersion"],
            },
            "spec": self.obj.get("spec"),
            "status": status_document(self.kind, job, status),
        }
        try:
            self.obj = self.kube.replace(self.kind.path(self.namespace, self.name, "status"), body)
        except ApiError as error:
            if error.status in (409, 404):
                raise StatusConflict(error.message) from None
            raise
        self.written = status

    def _launch(self, job: TrainingJob, action: LaunchPod) -> None:
        self._ensure_service(job)
        with self.shared.lock:
            self.shared.tombstones.pop((self.namespace, action.pod), None)
        body = manifests.pod(self.kind, job, action, self.shared.scheduler)
        try:
            created = self.kube.create(f"/api/v1/namespaces/{self.namespace}/pods", body)
            self.shared.pods.put(created)
        except ApiError as error:
            if error.status != 409:
                raise
            cached = self.shared.pods.get(self.namespace, action.pod)
            if cached is not None and _generation(cached) >= action.generation:
                return  # launched before; the watch has it already
            existing = self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods/{action.pod}")
            generation = int(existing["metadata"].get("labels", {}).get(manifests.LABEL_GENERATION, 0))
            if generation >= action.generation:
                return  # launched before (by us, before a crash, or by the other replica)
            # The previous incarnation is still there although the controller saw it gone (it is on its way
            # out): remove it now, and create this one as soon as it is gone (``observe`` retries).
            self._delete_pod(action.pod, existing["metadata"]["uid"], grace=0)
            with self.shared.lock:
                self.shared.pending_launches[(self.namespace, action.pod)] = body

    def _ensure_service(self, job: TrainingJob) -> None:
        uid = job.metadata.uid or ""
        if uid in self.shared.services:
            return
        try:
            self.kube.create(
                f"/api/v1/namespaces/{self.namespace}/services", manifests.service(self.kind, job)
            )
        except ApiError as error:
            if error.status != 409:
                raise
        self.shared.services.add(uid)

    # ---- the rendezvous store (PyTorch jobs) -----------------------------------------------------------

    def _tend_rendezvous_logged(self, job: TrainingJob, launching: bool = False) -> None:
        try:
            self._tend_rendezvous(job, launching)
        except ApiError as error:  # the next reconcile tries again (the store's pod events trigger one)
            log.warning("%s/%s: rendezvous store: %s", self.namespace, self.name, error)

    def _tend_rendezvous(self, job: TrainingJob, launching: bool) -> None:
        """Level-triggered: the job's store pod exists while any of its replica pods may still run (pending,
        running, terminating; ``launching``: some are about to be created) and is removed once none does; one that failed, was deleted, or sits on a node
        that is not Ready is created again. The pod is no replica: its loss is no fault of the job."""
        if not manifests.hosts_rendezvous(job):
            return
        uid = job.metadata.uid
        name = manifests.rendezvous_pod_name(job)
        store = self.shared.pods.get(self.namespace, name)
        if store is not None and not _owned_by(store, uid):
            return  # an earlier job's of the same name, on its way out (garbage collection)
        live = [
            p
            for p in self.shared.pods.select(self.namespace, {manifests.LABEL_JOB: job.name})
            if is_ours(p) and _owned_by(p, uid) and (p.get("status") or {}).get("phase") not in _ENDED
        ]
        if not live and not launching:
            if store is not None and not store["metadata"].get("deletionTimestamp"):
                self._delete_pod(name, store["metadata"]["uid"], grace=None)
            return
        if store is not None:
            phase = (store.get("status") or {}).get("phase")
            node = (store.get("spec") or {}).get("nodeName") or ""
            node_lost = bool(node) and self.shared.node_is_ready(node) is False
            if phase not in _ENDED and not node_lost:
                return  # serving, starting, or on its way out on a working node (its deletion wakes us)
            log.info("%s/%s: rendezvous store %s is %s: creating it again", self.namespace, self.name,
                     name, "on a node that is not Ready" if node_lost else phase)  # fmt: skip
            self._delete_pod(name, store["metadata"]["uid"], grace=0)
        self._ensure_rendezvous_service(job, again=store is not None)
        try:
            self.shared.pods.put(
                self.kube.create(
                    f"/api/v1/namespaces/{self.namespace}/pods",
                    manifests.rendezvous_pod(self.kind, job, self.shared.scheduler),
                )
            )
        except ApiError as error:
            if error.status != 409:  # there already (the watch is behind): the next event tells
                raise

    def _ensure_rendezvous_service(self, job: TrainingJob, again: bool) -> None:
        """Created with the store's first pod; asked for again whenever the pod is recreated."""
        uid = job.metadata.uid or ""
        if uid in self.shared.rendezvous_services and not again:
            return
        body = manifests.rendezvous_service(self.kind, job)
        path = f"/api/v1/namespaces/{self.namespace}/services"
        try:
            self.kube.create(path, body)
        except ApiError as error:
            if error.status != 409:
                raise
            existing = self.kube.get(f"{path}/{body['metadata']['name']}")
            if not _owned_by(existing, uid):
                raise ApiError(
                    409, f"service {body['metadata']['name']} exists and belongs to something else"
                ) from None
        self.shared.rendezvous_services.add(uid)

    def _terminate(self, action: TerminatePod) -> None:
        pod = self.shared.pods.get(self.namespace, action.pod)
        if pod is None:
            return
        generation = int(pod["metadata"].get("labels", {}).get(manifests.LABEL_GENERATION, 0))
        if generation != action.generation:
            return
        self._delete_pod(action.pod, pod["metadata"]["uid"], grace=0 if action.force else None)

    def _delete_pod(self, name: str, uid: str, grace: int | None) -> None:
        try:
            self.kube.delete(f"/api/v1/namespaces/{self.namespace}/pods/{name}", grace=grace, uid=uid)
        except ApiError as error:
            if error.status not in (404, 409):  # gone already, or a newer pod of that name
                raise

    def _restart_in_place(self, action: RestartInPlace) -> None:
        patch = {"metadata": {"annotations": {manifests.ANNOTATION_IN_PLACE: str(action.attempt)}}}
        try:
            self.kube.patch(f"/api/v1/namespaces/{self.namespace}/pods/{action.pod}", patch)
        except ApiError as error:
            if error.status != 404:
                raise

    def _discovery(self, job: TrainingJob, action: UpdateDiscovery) -> None:
        body = manifests.discovery_config_map(self.kind, job, action.version, action.hosts)
        path = f"/api/v1/namespaces/{self.namespace}/configmaps"
        try:
            self.kube.create(path, body)
            return
        except ApiError as error:
            if error.status != 409:
                raise
        existing = self.kube.get(f"{path}/{body['metadata']['name']}")
        annotations = existing["metadata"].get("annotations") or {}
        if int(annotations.get("trainguard.io/discovery-version", "0")) >= action.version:
            return
        body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        self.kube.replace(f"{path}/{body['metadata']['name']}", body)

    # ---- nudges ------------------------------------------------------------------------------------

    def _nudge(self, action: NudgeSurvivors) -> None:
        """Hand the failure to each survivor's agent: ``<token> <time>`` in the pod's nudge annotation, which
        kubelet projects into the file the agent polls (``--nudge-file``); the agent SIGKILLs its workers
        started before that time."""
        value = f"{action.token} {action.failed_at:.3f}"
        patch = {"metadata": {"annotations": {manifests.ANNOTATION_NUDGE: value}}}
        for name in action.pods:
            try:
                self.shared.pods.put(
                    self.kube.patch(f"/api/v1/namespaces/{self.namespace}/pods/{name}", patch)
                )
            except ApiError as error:
                if error.status != 404:  # gone meanwhile: nothing to nudge
                    raise

    def _event(self, job: TrainingJob, action: EmitEvent) -> None:
        digest = hashlib.sha256(action.key.encode()).hexdigest()[:16]
        when = _rfc3339(action.at)
        involved: Obj = {
            "apiVersion": self.kind.api_version,
            "kind": self.kind.kind,
            "name": self.name,
            "namespace": self.namespace,
            "uid": job.metadata.uid or "",
        }
        if action.pod is not None:
            involved = {"apiVersion": "v1", "kind": "Pod", "name": action.pod, "namespace": self.namespace}
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{self.name}.{digest}", "namespace": self.namespace},
            "involvedObject": involved,
            "type": action.type.value,
            "reason": action.reason,
            "message": action.message[:1024],
            "firstTimestamp": when,
            "lastTimestamp": when,
            "count": 1,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.shared.identity,
        }
        try:
            self.kube.create(f"/api/v1/namespaces/{self.namespace}/events", body)
        except ApiError as error:
            if error.status != 409:  # the same key: sent before
                raise


_ENDED = ("Succeeded", "Failed")


def _generation(pod: Obj) -> int:
    return int((pod["metadata"].get("labels") or {}).get(manifests.LABEL_GENERATION, 0))


def _owned_by(pod: Obj, uid: str | None) -> bool:
    """Pods of an earlier job of the same name (not yet collected) are not this job's."""
    owners = pod["metadata"].get("ownerReferences") or []
    return uid is None or any(owner.get("uid") == uid for owner in owners)


#: Condition times are written as Kubernetes writes them (RFC 3339, UTC, whole seconds), as CCE's docs
#: show them;
#: the controller keeps epoch seconds. Every other time of the status stays in epoch seconds.
_CONDITION_TIMES = ("lastTransitionTime", "lastProbeTime")


def status_document(kind: JobKind, job: TrainingJob, status: JobStatus) -> Obj:
    """The controller's status as stored, plus the label selector that the scale subresource reads."""
    selector = f"{manifests.LABEL_JOB}={job.name},{manifests.LABEL_ROLE}={kind.scale_role}"
    document = {**status.to_dict(), "selector": selector}
    document["conditions"] = [
        {**c, **{k: _rfc3339(c[k]) for k in _CONDITION_TIMES if isinstance(c.get(k), (int, float))}}
        for c in document.get("conditions") or []
    ]
    return document


def read_status(obj: Obj) -> JobStatus:
    data = dict(obj.get("status") or {})
    data.pop("selector", None)
    if not data:
        return JobStatus()
    data["conditions"] = [
        {**c, **{k: parse_time(c[k]) for k in _CONDITION_TIMES if isinstance(c.get(k), str)}}
        for c in data.get("conditions") or []
    ]
    return JobStatus.from_dict(data)


def _rfc3339(epoch: float) -> str:
    # Whole seconds first: fromtimestamp rounds to the microsecond, which carries 1.9999995 over to 2.
    return datetime.fromtimestamp(math.floor(epoch), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
