"""The rendezvous store of a PyTorch job on Kubernetes: its pod and its Service, kept while the job's pods may
run (``rendezvous.rendezvous_pod`` says what they are). Its loss is no fault of the job: the pod is created
again, on another node when its node is lost."""

from __future__ import annotations

import logging
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


class StorePod:
    """One job's store pod and Service, for one reconcile."""

    def __init__(self, shared: Shared, kind: JobKind, namespace: str, name: str) -> None:
        self.shared = shared
        self.kube = shared.kube
        self.kind = kind
        self.namespace = namespace
        self.name = name

    def tend_logged(self, job: TrainingJob, launching: bool = False) -> None:
        try:
            self.tend(job, launching)
        except ApiError as error:  # the next reconcile tries again (the store's pod events trigger one)
            log.warning("%s/%s: rendezvous store: %s", self.namespace, self.name, error)

    def tend(self, job: TrainingJob, launching: bool) -> None:
        """Level-triggered: the job's store pod exists while any of its replica pods may still run (pending,
        running, terminating; ``launching``: some are about to be created) and is removed once none does; one
        that failed, was deleted, or sits on a node that is not Ready is created again. The pod is no replica: its loss is no fault of the job."""
        if not rendezvous.hosts_rendezvous(job):
            return
        uid = job.metadata.uid
        name = rendezvous.rendezvous_pod_name(job)
        store = self.shared.pods.get(self.namespace, name)
        if store is not None and not owned_by(store, uid):
            return  # an earlier job's of the same name, on its way out (garbage collection)
        alive = [
            p
            for p in self.shared.pods.select(self.namespace, {LABEL_JOB: job.name})
            if is_ours(p) and owned_by(p, uid) and (p.get("status") or {}).get("phase") not in ENDED
        ]
        if not alive and not launching:
            if store is not None and not store["metadata"].get("deletionTimestamp"):
                delete_pod(self.kube, self.namespace, name, store["metadata"]["uid"], grace=None)
            return
        if store is not None:
            phase = (store.get("status") or {}).get("phase")
            node = (store.get("spec") or {}).get("nodeName") or ""
            node_lost = bool(node) and self.shared.node_is_ready(node) is False
            if phase not in ENDED and not node_lost:
                return  # serving, starting, or on its way out on a working node (its deletion wakes us)
            log.info("%s/%s: rendezvous store %s is %s: creating it again", self.namespace, self.name,
                     name, "on a node that is not Ready" if node_lost else phase)  # fmt: skip
            delete_pod(self.kube, self.namespace, name, store["metadata"]["uid"], grace=0)
        self._ensure_service(job, again=store is not None)
        try:
            self.shared.pods.put(
                self.kube.create(
                    f"/api/v1/namespaces/{self.namespace}/pods",
                    rendezvous.rendezvous_pod(self.kind, job, self.shared.settings),
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
