"""The operator's verbs (``trainguard.controller.apply``): what each action of one job's batch does on the API
server. Idempotency comes from the cluster itself: a pod's name is unique, so creating an incarnation that exists
answers 409 (done already); deleting names the pod's uid, so an incarnation that is gone is not touched twice; an
event's name is derived from its key; the status is written with the resourceVersion it was read at, and a
conflict (someone else wrote first) stops the batch: the job is read again and decided again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from functools import partial
from typing import Any, Protocol

from trainguard.api import FrameworkType, TrainingJob
from trainguard.backends.k8s import (
    access,
    discovery,
    isolation,
    manifests,
    metadata,
    podgroups,
    services,
    ssh,
)
from trainguard.backends.k8s.client import ApiError
from trainguard.backends.k8s.events import event_body, post_event
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.shared import Shared, delete_pod, generation_of, owned_by, owner_uid
from trainguard.backends.k8s.status import status_document
from trainguard.backends.k8s.store_pod import StorePod
from trainguard.controller.apply import ErrorLog, in_order
from trainguard.controller.backend import (
    Action,
    ActionError,
    EmitEvent,
    EventType,
    IsolateNode,
    LaunchPod,
    NotYet,
    NudgeSurvivors,
    ReleaseSurvivors,
    RestartInPlace,
    StatusConflict,
    TerminatePod,
    UpdateDiscovery,
    WriteStatus,
)
from trainguard.controller.status import JobStatus

Obj = dict[str, Any]
log = logging.getLogger(__name__)


class JobState(Protocol):
    """What the verbs read and write of one job's backend (``JobBackend``): the resource as read, and the
    status last written (a status write replaces both)."""

    shared: Shared
    kind: JobKind
    namespace: str
    name: str
    obj: Obj
    written: JobStatus | None
    store_pod: StorePod


class OperatorVerbs:
    """The operator's hands for one job and one batch (``trainguard.controller.apply``): each verb carries its
    action out on the API server."""

    def __init__(self, backend: JobState, job: TrainingJob) -> None:
        self.backend = backend
        self.job = job
        self.shared = backend.shared
        self.kube = backend.shared.kube
        self.kind = backend.kind
        self.namespace = backend.namespace
        self.name = backend.name

    failures: tuple[type[Exception], ...] = (ApiError,)

    def now(self) -> float:
        return self.shared.clock()

    def keep_error(self, error: ActionError) -> None:
        log.warning("%s/%s: %s failed: %s", self.namespace, self.name, error.key, error.message)
        with self.shared.lock:
            self.shared.errors.setdefault((self.namespace, self.name), ErrorLog()).add(error)

    @contextmanager
    def batch(self, actions: Sequence[Action]) -> Iterator[None]:
        yield
        self.backend.store_pod.tend(self.job)

    def before_launches(self) -> None:
        """What a pod is refused or cannot start without: its PodGroup, ServiceAccount, Secret, ConfigMap."""
        job = self.job
        self._ensure_pod_group(job)
        self._ensure_pod_access(job)
        self._ensure_ssh_secret(job)
        self._ensure_discovery(job)

    def beside_launches(self) -> Sequence[Callable[[], None]]:
        """The job's Service (its pods' names resolve once it is there) and its rendezvous store (the agents
        wait for it, within their patience; its writes go out without the batch waiting for them): side by
        side with the pods, not one round trip before them."""
        job = self.job
        return (
            partial(self._ensure_service, job),
            partial(self.backend.store_pod.tend, job, launching=True),
        )

    def side_by_side(self, chains: Sequence[Callable[[], None]]) -> None:
        if len(chains) <= 1:
            in_order(chains)
            return
        futures: list[Future[None]] = [self.shared.pool.submit(chain) for chain in chains]
        for future in futures:
            future.result()  # an unexpected error surfaces here (the reconcile is retried)

    def write_status(self, action: WriteStatus) -> None:
        job, status = self.job, action.status
        body = {
            "apiVersion": self.kind.api_version,
            "kind": self.kind.kind,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": self.backend.obj["metadata"]["resourceVersion"],
            },
            # No spec: the status subresource keeps the stored object's and takes only this status.
            "status": status_document(self.kind, job, status),
        }
        try:
            self.backend.obj = self.kube.replace(self.kind.path(self.namespace, self.name, "status"), body)
        except ApiError as error:
            if error.status in (409, 404):
                raise StatusConflict(error.message) from None
            raise
        self.backend.written = status

    def launch(self, action: LaunchPod) -> None:
        job = self.job
        uid = job.metadata.uid or ""
        with self.shared.lock:
            tombs = self.shared.tombstones.get(uid, {})
            tombs.pop(action.pod, None)
            if not tombs:
                self.shared.tombstones.pop(uid, None)
        body = manifests.pod(self.kind, job, action, self.shared.pod_settings())
        try:
            created = self.kube.create(f"/api/v1/namespaces/{self.namespace}/pods", body)
            self.shared.pods.put(created)
        except ApiError as error:
            if error.status != 409:
                raise
            cached = self.shared.pods.get(self.namespace, action.pod)
            ours = partial(owned_by, uid=job.metadata.uid)
            if cached is not None and ours(cached) and generation_of(cached) >= action.generation:
                return  # launched before; the watch has it already
            existing = self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods/{action.pod}")
            if ours(existing) and generation_of(existing) >= action.generation:
                return  # launched before (by us, before a crash, or by the other replica)
            if not ours(existing) and not self._left_by_earlier_job(existing, job):
                # Job ``train`` with a role ``big-worker`` and job ``train-big`` with a role ``worker`` both
                # name a pod ``train-big-worker-0``: the other job's pod is never touched.
                owner = owner_uid(existing) or "none"
                message = f"pod {action.pod} exists and is another job's (owner uid {owner})"
                raise ApiError(409, message) from None
            # The previous incarnation is still there although the controller saw it gone (it is on its way
            # out), or a pod of an earlier job of this name (not yet collected): remove it now; the controller
            # launches this one again (a new key) once it is gone.
            self._delete_pod(action.pod, existing["metadata"]["uid"], grace=0)
            message = f"pod {action.pod}: an earlier pod of this name is still there; it is being removed"
            raise NotYet(message) from None

    def _left_by_earlier_job(self, pod: Obj, job: TrainingJob) -> bool:
        """A pod of an earlier job of this kind and name, deleted since (only one of them exists at a time):
        garbage that the collector removes anyway, not another job's."""
        labels = pod["metadata"].get("labels") or {}
        same = (labels.get(metadata.LABEL_JOB), labels.get(metadata.LABEL_KIND))
        return same == (job.name, self.kind.kind)

    def _ensure_service(self, job: TrainingJob) -> None:
        self._create_once(self.shared.services, job, lambda: [("services", services.service(self.kind, job))])

    def _ensure_discovery(self, job: TrainingJob) -> None:
        """A Horovod job's discovery ConfigMap, before its pods: they mount it, and a pod whose ConfigMap is
        missing never starts. It lists no host (version 0) until the controller's first ``UpdateDiscovery``."""
        if job.spec.framework_type is FrameworkType.HOROVOD:
            body = discovery.discovery_config_map(self.kind, job, 0, ())
            self._create_once(self.shared.discovery_maps, job, lambda: [("configmaps", body)])

    def _ensure_ssh_secret(self, job: TrainingJob) -> None:
        """For ``plugin.ssh``: the job's key pair, before its pods (they mount it). Made once: an existing
        Secret is kept, so pods already running keep trusting each other."""
        if ssh.wants_ssh(job):
            self._create_once(self.shared.ssh_secrets, job, lambda: [("secrets", ssh.secret(self.kind, job))])

    def _ensure_pod_access(self, job: TrainingJob) -> None:
        """For a job whose pods run a barrier: its ServiceAccount, Role (list pods) and RoleBinding, before its
        pods (a pod naming a ServiceAccount that does not exist yet is refused)."""
        if access.needs_pod_access(job):
            plural = {"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings"}
            self._create_once(
                self.shared.pod_access,
                job,
                lambda: [(plural[body["kind"]], body) for body in access.access_objects(self.kind, job)],
            )

    def _create_once(
        self, done: set[str], job: TrainingJob, objects: Callable[[], list[tuple[str, Obj]]]
    ) -> None:
        """Objects a job needs before its pods, created once per job (``done``: the uids of jobs that have
        them; a 409 means they exist already). ``objects`` gives (plural, body) pairs, made only when needed."""
        uid = job.metadata.uid or ""
        if uid in done:
            return
        for plural, body in objects():
            group = body["apiVersion"]
            base = "/api/v1" if group == "v1" else f"/apis/{group}"
            try:
                self.kube.create(f"{base}/namespaces/{self.namespace}/{plural}", body)
            except ApiError as error:
                if error.status != 409:
                    raise
        with self.shared.lock:
            done.add(uid)

    def _ensure_pod_group(self, job: TrainingJob) -> None:
        podgroups.ensure_pod_group(self.shared, self.kind, self.namespace, job, self.emit_event)

    def terminate(self, action: TerminatePod) -> None:
        job = self.job
        pod = self._own_pod(job, action.pod)
        if pod is None:
            return
        generation = int(pod["metadata"].get("labels", {}).get(metadata.LABEL_GENERATION, 0))
        if generation != action.generation:
            return
        self._delete_pod(action.pod, pod["metadata"]["uid"], grace=0 if action.force else None)

    def _delete_pod(self, name: str, uid: str, grace: int | None) -> None:
        delete_pod(self.kube, self.namespace, name, uid, grace)

    def _own_pod(self, job: TrainingJob, name: str) -> Obj | None:
        """The pod of this name as the watch has it, if it is this job's (by uid; a pod of the same name may
        be another job's)."""
        pod = self.shared.pods.get(self.namespace, name)
        return pod if pod is not None and owned_by(pod, job.metadata.uid) else None

    def restart_in_place(self, action: RestartInPlace) -> None:
        job = self.job
        if self._own_pod(job, action.pod) is None:
            return  # gone, or another job's
        patch = {"metadata": {"annotations": {manifests.ANNOTATION_IN_PLACE: str(action.attempt)}}}
        try:
            self.kube.patch(f"/api/v1/namespaces/{self.namespace}/pods/{action.pod}", patch)
        except ApiError as error:
            if error.status != 404:
                raise

    def update_discovery(self, action: UpdateDiscovery) -> None:
        job = self.job
        # Each host by its pod's address as the pod is now: a replaced pod is a new host to Horovod.
        hosts = tuple(
            f"{discovery.horovod_host(job, pod, self.shared.pods.get(self.namespace, pod))}:{slots}"
            for pod, _, slots in (host.rpartition(":") for host in action.hosts)
        )
        body = discovery.discovery_config_map(self.kind, job, action.version, hosts)
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

    def nudge(self, action: NudgeSurvivors) -> None:
        """Hand the failure to each survivor's agent: ``<token> <time>`` in the pod's nudge annotation, which
        kubelet projects into the file the agent polls (``--nudge-file``); the agent SIGKILLs its workers
        started before that time."""
        from trainguard.agent.nudge import format_nudge  # the agent's side: loaded when a nudge is first sent

        job = self.job
        value = format_nudge(action.token, action.failed_at).strip()
        self._annotate_survivors(job, action.pods, manifests.ANNOTATION_NUDGE, lambda _: value)

    def release(self, action: ReleaseSurvivors) -> None:
        """Hand the lost peer's addresses to each survivor's agent: ``<token> <addresses>`` in the pod's release
        annotation, which kubelet projects into the file the agent polls (``--release-file``); the agent shuts
        down its processes' connections to them (and, in the other hosts, their quiet ones to each other)."""
        from trainguard.agent.release import format_release  # the agent's side, as format_nudge

        job = self.job

        def value(name: str) -> str:
            peers = action.peers if name in action.hosts else ()
            return format_release(action.token, action.addresses, peers).strip()

        self._annotate_survivors(job, action.pods, manifests.ANNOTATION_RELEASE, value)

    def _annotate_survivors(
        self, job: TrainingJob, pods: Sequence[str], annotation: str, value: Callable[[str], str]
    ) -> None:
        """Set ``annotation`` to ``value(pod)`` on each of ``pods`` that is this job's; one gone meanwhile (or
        another job's) has nothing to hear."""
        for name in pods:
            if self._own_pod(job, name) is None:
                continue
            patch = {"metadata": {"annotations": {annotation: value(name)}}}
            try:
                self.shared.pods.put(
                    self.kube.patch(f"/api/v1/namespaces/{self.namespace}/pods/{name}", patch)
                )
            except ApiError as error:
                if error.status != 404:  # gone meanwhile
                    raise

    def isolate_node(self, action: IsolateNode) -> None:
        """Taint, label and annotate the Node, with a Node Event (``backends.k8s.isolation``). The node is
        the one the API server bound the pod to, which the controller read from the pod, never the pod's
        own word."""
        by = f"{self.namespace}/{self.name}/{action.pod}: {action.reason}"
        try:
            isolation.isolate(self.kube, action.node, by, action.reason, self.now(), action.key)
        except ApiError as error:
            if error.status == 403:
                # Said on the job too, where its owner looks; the action is still recorded as failed.
                message = (
                    f"node {action.node} could not be isolated: the API server refused ({error.message}); the "
                    "operator's ClusterRole needs patch on nodes (the chart's has it). Its pods avoid the node "
                    "all the same; other jobs' do not"
                )
                self.emit_event(
                    EmitEvent(
                        f"{action.key}/refused",
                        EventType.WARNING,
                        "NodeNotIsolated",
                        message,
                        self.now(),
                        action.pod,
                    )
                )
            raise

    def emit_event(self, action: EmitEvent) -> None:
        """Handed to the operator's Event sender where it has one (the batch does not wait for it; a refusal is
        kept as this action's error when it comes), else sent at once."""
        job = self.job
        uid = job.metadata.uid or ""
        body = event_body(self.kind, self.namespace, self.name, uid, action, self.shared.identity)
        sender = self.shared.events
        if sender is None:
            post_event(self.kube, body)
            return
        sender.send(body, lambda error: self.keep_error(ActionError(action.key, str(error), self.now())))
