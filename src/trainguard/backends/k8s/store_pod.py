"""The rendezvous store of a PyTorch job on Kubernetes: its pod and its Service, kept while the job's pods may
run (``rendezvous.rendezvous_pod`` says what they are). Its loss is no fault of the job: the pod is created
again, on another node when its node is lost.

A reconcile looks at the store (in the watched cache, no round trip) and hands what is to be written to the
operator's pool without waiting for it: the job's pods are not created after the store, and a reconcile
worker is not held while the API server allocates the Service's address. One job's store writes go out one
after the other: a look asked for while some are in flight is taken again, with the newest job, once they are
done (``Shared.store_requests``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.k8s import rendezvous
from trainguard.backends.k8s.client import ApiError
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.metadata import LABEL_JOB
from trainguard.backends.k8s.observe import is_ours
from trainguard.backends.k8s.shared import ENDED, Shared, delete_pod, owned_by

Obj = dict[str, Any]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoreWrites:
    """What one look at a job's store found to write: a pod to delete (by uid; grace 0 when it is created
    again at once, the API server's default when the job needs it no more), and whether to create it."""

    job: TrainingJob
    delete_uid: str | None = None
    create: bool = False


class StorePod:
    """One job's store pod and Service, as one reconcile looks at them; the writes it hands to the pool may
    outlive that reconcile (and run the looks asked for after it)."""

    def __init__(self, shared: Shared, kind: JobKind, namespace: str, name: str) -> None:
        self.shared = shared
        self.kube = shared.kube
        self.kind = kind
        self.namespace = namespace
        self.name = name

    def tend(self, job: TrainingJob, launching: bool = False) -> None:
        """Looks at the job's store and hands what is to be written to the pool (the module's docstring); does
        not wait for it."""
        uid = job.metadata.uid or ""
        if self._asked_again(uid, job, launching):
            return
        writes = self.look(job, launching)
        if writes is None or self._asked_again(uid, job, launching, writing=True):
            return
        try:
            self.shared.pool.submit(self._write_all, uid, writes)
        except RuntimeError:  # the operator is stopping: its successor looks again
            with self.shared.lock:
                self.shared.store_requests.pop(uid, None)

    def _asked_again(self, uid: str, job: TrainingJob, launching: bool, writing: bool = False) -> bool:
        """True where the job's store writes are in flight: the look is asked for again, once they are done
        (with the newest job; ``launching`` stays asked for). Otherwise False, and ``writing`` marks the
        caller's writes in flight."""
        with self.shared.lock:
            requests = self.shared.store_requests
            if uid in requests:
                pending = requests[uid]
                requests[uid] = (job, launching or (pending is not None and pending[1]))
                return True
            if writing:
                requests[uid] = None
            return False

    def _write_all(self, uid: str, writes: StoreWrites | None) -> None:
        """Carries ``writes`` out, then every look asked for meanwhile, until none is left."""
        while True:
            if writes is not None:
                self._write_logged(writes)
            with self.shared.lock:
                pending = self.shared.store_requests.get(uid)
                if pending is None:
                    self.shared.store_requests.pop(uid, None)
                    return
                self.shared.store_requests[uid] = None
            writes = self.look(*pending)

    def _write_logged(self, writes: StoreWrites) -> None:
        try:
            self.write(writes)
        except ApiError as error:  # the next reconcile tries again (the store's pod events trigger one)
            log.warning("%s/%s: rendezvous store: %s", self.namespace, self.name, error)
        except Exception:  # a bug: said, and the next look goes on
            log.exception("%s/%s: rendezvous store", self.namespace, self.name)

    def look(self, job: TrainingJob, launching: bool) -> StoreWrites | None:
        """Level-triggered: the job's store pod exists while any of its replica pods may still run (pending,
        running, terminating; ``launching``: some are about to be created) and is removed once none does; one
        that failed, was deleted, or sits on a node that is not Ready is created again. The pod is no replica:
        its loss is no fault of the job. Reads the caches only."""
        if not rendezvous.hosts_rendezvous(job):
            return None
        uid = job.metadata.uid
        name = rendezvous.rendezvous_pod_name(job)
        store = self.shared.pods.get(self.namespace, name)
        if store is not None and not owned_by(store, uid):
            return None  # an earlier job's of the same name, on its way out (garbage collection)
        alive = [
            p
            for p in self.shared.pods.select(self.namespace, {LABEL_JOB: job.name})
            if is_ours(p) and owned_by(p, uid) and (p.get("status") or {}).get("phase") not in ENDED
        ]
        if not alive and not launching:
            if store is not None and not store["metadata"].get("deletionTimestamp"):
                return StoreWrites(job, delete_uid=store["metadata"]["uid"])
            return None
        if store is None:
            return StoreWrites(job, create=True)
        phase = (store.get("status") or {}).get("phase")
        node = (store.get("spec") or {}).get("nodeName") or ""
        node_lost = bool(node) and self.shared.node_is_ready(node) is False
        if phase not in ENDED and not node_lost:
            return None  # serving, starting, or on its way out on a working node (its deletion wakes us)
        log.info("%s/%s: rendezvous store %s is %s: creating it again", self.namespace, self.name,
                 name, "on a node that is not Ready" if node_lost else phase)  # fmt: skip
        return StoreWrites(job, delete_uid=store["metadata"]["uid"], create=True)

    def write(self, writes: StoreWrites) -> None:
        """Carries out one look's writes, raising as a verb does."""
        job = writes.job
        name = rendezvous.rendezvous_pod_name(job)
        if writes.delete_uid is not None:
            delete_pod(self.kube, self.namespace, name, writes.delete_uid, grace=0 if writes.create else None)
        if not writes.create:
            return
        self._ensure_service(job, again=writes.delete_uid is not None)
        try:
            self.shared.pods.put(
                self.kube.create(
                    f"/api/v1/namespaces/{self.namespace}/pods",
                    rendezvous.rendezvous_pod(self.kind, job, self.shared.pod_settings()),
                )
            )
        except ApiError as error:
            if error.status != 409:  # there already (the watch is behind): the next event tells
                raise

    def _ensure_service(self, job: TrainingJob, again: bool) -> None:
        """Created with the store's first pod; asked for again whenever the pod is recreated."""
        uid = job.metadata.uid or ""
        if uid in self.shared.rendezvous_services and not again:
            return
        body = rendezvous.rendezvous_service(self.kind, job)
        path = f"/api/v1/namespaces/{self.namespace}/services"
        try:
            self.kube.create(path, body)
        except ApiError as error:
            if error.status != 409:
                raise
            existing = self.kube.get(f"{path}/{body['metadata']['name']}")
            if not owned_by(existing, uid):
                raise ApiError(
                    409, f"service {body['metadata']['name']} exists and belongs to something else"
                ) from None
        self.shared.rendezvous_services.add(uid)
