"""The controller's backend interface (``trainguard.controller.backend``) over the Kubernetes API, for one job.

``observe`` reads the watched caches (pods of the job, all nodes); ``apply`` writes to the API server.
Idempotency comes from the cluster itself: a pod's name is unique, so creating an incarnation that exists
answers 409 (done already); deleting names the pod's uid, so an incarnation that is gone is not touched
twice; an event's name is derived from its key; the status is written with the resourceVersion it was read
at, and a conflict (someone else wrote first) stops the batch: the job is read again and decided again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any

from trainguard.api import FrameworkType, TrainingJob
from trainguard.backends.k8s import gang, manifests, ssh
from trainguard.backends.k8s.client import ApiError
from trainguard.backends.k8s.events import event_body
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.observe import is_ours, observed_pod
from trainguard.backends.k8s.shared import Shared, delete_pod, generation_of, owned_by, owner_uid
from trainguard.backends.k8s.status import StatusConflict, status_document
from trainguard.backends.k8s.store_pod import StorePod
from trainguard.controller.backend import (
    Action,
    ActionError,
    EmitEvent,
    LaunchPod,
    NudgeSurvivors,
    Observed,
    RestartInPlace,
    TerminatePod,
    UpdateDiscovery,
    WriteStatus,
)
from trainguard.controller.status import JobStatus

Obj = dict[str, Any]
log = logging.getLogger(__name__)
_MAX_ERRORS = 50


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
        self.store_pod = StorePod(shared, kind, self.namespace, self.name)

    # ---- observe -----------------------------------------------------------------------------------

    def observe(self, job: TrainingJob) -> Observed:
        pods = [
            p
            for p in self.shared.pods.select(self.namespace, {manifests.LABEL_JOB: job.name})
            if is_ours(p) and owned_by(p, job.metadata.uid)
        ]
        seen = [observed_pod(p) for p in pods]
        names = {p.name for p in seen}
        # A vanished pod's last view is shown until the controller has moved its slot past that incarnation.
        decided = {
            p.get("name"): p.get("generation", 1) for p in (self.obj.get("status") or {}).get("pods", [])
        }
        # This job's own (by uid): another job's pods are never its business, whatever their names.
        uid = job.metadata.uid or ""
        with self.shared.lock:
            tombs = self.shared.tombstones.get(uid, {})
            for name, tomb in list(tombs.items()):
                if decided.get(name, 1) > tomb.generation:
                    del tombs[name]
                elif name not in names:
                    seen.append(tomb)
            if not tombs:
                self.shared.tombstones.pop(uid, None)
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
        """Create this job's launches that waited for their pod's previous incarnation to be gone (by the job's
        uid: another job's are left to that job)."""
        uid = job.metadata.uid or ""
        with self.shared.lock:
            waiting = self.shared.pending_launches.get(uid, {})
            due = [(name, body) for name, body in waiting.items() if name not in present]
        for name, body in due:
            try:
                self.shared.pods.put(self.kube.create(f"/api/v1/namespaces/{self.namespace}/pods", body))
            except ApiError as error:
                if error.status == 409:
                    continue  # not gone yet
                log.warning("%s/%s: launch of %s: %s", self.namespace, self.name, name, error)
            with self.shared.lock:
                waiting.pop(name, None)
                if not waiting:
                    self.shared.pending_launches.pop(uid, None)

    # ---- apply -------------------------------------------------------------------------------------

    def apply(self, job: TrainingJob, actions: Sequence[Action]) -> None:
        """In order around the status writes; between two writes, the actions on different pods (and
        every event) go out side by side, the actions on one pod one after the other."""
        if any(isinstance(a, LaunchPod) for a in actions):
            # The store first, so that the agents of the first pods find it as soon as they start.
            self.store_pod.tend_logged(job, launching=True)
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
        self.store_pod.tend_logged(job)

    def _apply_side_by_side(self, job: TrainingJob, actions: list[Action]) -> None:
        if any(isinstance(a, LaunchPod) for a in actions):
            self._try(actions[0], partial(self._ensure_service, job))
            self._try(actions[0], partial(self._ensure_pod_group, job))
            self._try(actions[0], partial(self._ensure_pod_access, job))
            self._try(actions[0], partial(self._ensure_ssh_secret, job))
            self._try(actions[0], partial(self._ensure_discovery, job))
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
            self._terminate(job, action)
        elif isinstance(action, RestartInPlace):
            self._restart_in_place(job, action)
        elif isinstance(action, NudgeSurvivors):
            self._nudge(job, action)
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
        uid = job.metadata.uid or ""
        with self.shared.lock:
            tombs = self.shared.tombstones.get(uid, {})
            tombs.pop(action.pod, None)
            if not tombs:
                self.shared.tombstones.pop(uid, None)
        body = manifests.pod(self.kind, job, action, self.shared.settings)
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
            # out), or a pod of an earlier job of this name (not yet collected): remove it now, and create this
            # one as soon as it is gone (``observe`` retries).
            self._delete_pod(action.pod, existing["metadata"]["uid"], grace=0)
            with self.shared.lock:
                self.shared.pending_launches.setdefault(uid, {})[action.pod] = body

    def _left_by_earlier_job(self, pod: Obj, job: TrainingJob) -> bool:
        """A pod of an earlier job of this kind and name, deleted since (only one of them exists at a time):
        garbage that the collector removes anyway, not another job's."""
        labels = pod["metadata"].get("labels") or {}
        same = (labels.get(manifests.LABEL_JOB), labels.get(manifests.LABEL_KIND))
        return same == (job.name, self.kind.kind)

    def _ensure_service(self, job: TrainingJob) -> None:
        self._create_once(
            self.shared.services, job, lambda: [("services", manifests.service(self.kind, job))]
        )

    def _ensure_discovery(self, job: TrainingJob) -> None:
        """A Horovod job's discovery ConfigMap, before its pods: they mount it, and a pod whose ConfigMap is
        missing never starts. It lists no host (version 0) until the controller's first ``UpdateDiscovery``."""
        if job.spec.framework_type is FrameworkType.HOROVOD:
            body = manifests.discovery_config_map(self.kind, job, 0, ())
            self._create_once(self.shared.discovery_maps, job, lambda: [("configmaps", body)])

    def _ensure_ssh_secret(self, job: TrainingJob) -> None:
        """For ``plugin.ssh``: the job's key pair, before its pods (they mount it). Made once: an existing
        Secret is kept, so pods already running keep trusting each other."""
        if ssh.wants_ssh(job):
            self._create_once(
                self.shared.ssh_secrets, job, lambda: [("secrets", manifests.ssh_secret(self.kind, job))]
            )

    def _ensure_pod_access(self, job: TrainingJob) -> None:
        """For a job whose pods run a barrier: its ServiceAccount, Role (list pods) and RoleBinding, before its
        pods (a pod naming a ServiceAccount that does not exist yet is refused)."""
        if manifests.needs_pod_access(job):
            plural = {"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings"}
            self._create_once(
                self.shared.pod_access,
                job,
                lambda: [(plural[body["kind"]], body) for body in manifests.access_objects(self.kind, job)],
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
        gang.ensure_pod_group(self.shared, self.kind, self.namespace, job, partial(self._event, job))

    def _terminate(self, job: TrainingJob, action: TerminatePod) -> None:
        pod = self._own_pod(job, action.pod)
        if pod is None:
            return
        generation = int(pod["metadata"].get("labels", {}).get(manifests.LABEL_GENERATION, 0))
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

    def _restart_in_place(self, job: TrainingJob, action: RestartInPlace) -> None:
        if self._own_pod(job, action.pod) is None:
            return  # gone, or another job's
        patch = {"metadata": {"annotations": {manifests.ANNOTATION_IN_PLACE: str(action.attempt)}}}
        try:
            self.kube.patch(f"/api/v1/namespaces/{self.namespace}/pods/{action.pod}", patch)
        except ApiError as error:
            if error.status != 404:
                raise

    def _discovery(self, job: TrainingJob, action: UpdateDiscovery) -> None:
        # Each host by its pod's address as the pod is now: a replaced pod is a new host to Horovod.
        hosts = tuple(
            f"{manifests.horovod_host(job, pod, self.shared.pods.get(self.namespace, pod))}:{slots}"
            for pod, _, slots in (host.rpartition(":") for host in action.hosts)
        )
        body = manifests.discovery_config_map(self.kind, job, action.version, hosts)
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

    def _nudge(self, job: TrainingJob, action: NudgeSurvivors) -> None:
        """Hand the failure to each survivor's agent: ``<token> <time>`` in the pod's nudge annotation, which
        kubelet projects into the file the agent polls (``--nudge-file``); the agent SIGKILLs its workers
        started before that time."""
        value = f"{action.token} {action.failed_at:.3f}"
        patch = {"metadata": {"annotations": {manifests.ANNOTATION_NUDGE: value}}}
        for name in action.pods:
            if self._own_pod(job, name) is None:
                continue  # gone meanwhile (nothing to nudge), or another job's
            try:
                self.shared.pods.put(
                    self.kube.patch(f"/api/v1/namespaces/{self.namespace}/pods/{name}", patch)
                )
            except ApiError as error:
                if error.status != 404:  # gone meanwhile: nothing to nudge
                    raise

    def _event(self, job: TrainingJob, action: EmitEvent) -> None:
        uid = job.metadata.uid or ""
        body = event_body(self.kind, self.namespace, self.name, uid, action, self.shared.identity)
        try:
            self.kube.create(f"/api/v1/namespaces/{self.namespace}/events", body)
        except ApiError as error:
            if error.status != 409:  # the same key: sent before
                raise
