"""The job pages of the operator (``--ui-port``): the same pages as the local control plane's, reading the job
resources the operator reconciles from its watch caches, their Events and their pods' logs from the API
server, and scaling a role by editing its ``replicas`` in the job resource (as ``kubectl edit`` would).

A job from the create page is created as the resource of its dialect (the document the page showed), as
``kubectl create -f`` would, and reconciled like any other: the operator needs ``create`` on the job kinds for
it, and takes only the kinds it serves, in the namespace it watches.

Jobs are named ``<namespace>/<name>`` in the pages. Who may act: whoever opens the address with the secret of
the chart's Secret ``<release>-ui`` (``--ui-token-file``), which only those who may read Secrets in the
operator's namespace can; through ``kubectl port-forward``, so the pages need no Service of their own.
There is no chaos here: faults on a cluster are injected with kubectl.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from trainguard.api import SpecError, TrainingJob
from trainguard.api.load import load_object
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.kinds import PYTORCHJOB, JobKind
from trainguard.backends.k8s.metadata import LABEL_JOB
from trainguard.backends.k8s.observe import parse_time
from trainguard.backends.k8s.shared import owned_by
from trainguard.policy.elastic import scale_refusal
from trainguard.ui.create import Created, Draft
from trainguard.ui.pages import PageError

Obj = dict[str, Any]
#: Events are read from the API server at most this often per job (the pages look twice a second).
EVENTS_TTL_S = 5.0
#: Events listed per request when a page reads a job's.
EVENTS_PAGE = 500
_REPLICA_SPECS = ("replicaSpecs", "pytorchReplicaSpecs")


class KubeSource:
    backend = "kubernetes"
    chaos_actions: tuple[str, ...] = ()

    def __init__(
        self,
        kube: Kube,
        kinds: Mapping[str, JobKind],
        jobs: Mapping[str, Cache],
        pods: Cache,
        watched: str | None = None,
    ) -> None:
        self.kube = kube
        #: The one namespace the operator watches (None: all of them).
        self.watched = watched
        self.namespace = watched or "default"
        self.kinds = kinds
        self.caches = jobs
        self.pods = pods
        self._events: dict[str, tuple[float, list[dict[str, Any]]]] = {}
        self._lock = threading.Lock()

    def jobs(self) -> list[tuple[str, TrainingJob, dict[str, Any]]]:
        found = []
        for kind, cache in self.caches.items():
            for obj in cache.items():
                job = _model(obj, self.kinds[kind])
                if job is not None:
                    meta = obj["metadata"]
                    found.append((f"{meta['namespace']}/{meta['name']}", job, self._view(obj)))
        return sorted(found, key=lambda item: item[0])

    def job(self, key: str) -> tuple[TrainingJob, dict[str, Any]]:
        kind, obj = self._find(key)
        job = _model(obj, kind)
        if job is None:
            raise PageError(f"job {key}: its spec is not valid; see its status", 409)
        return job, self._view(obj)

    def events(self, key: str) -> list[dict[str, Any]]:
        namespace, _ = _split(key)
        with self._lock:
            cached = self._events.get(key)
            if cached is not None and time.monotonic() - cached[0] < EVENTS_TTL_S:
                return cached[1]
        kind, obj = self._find(key)
        pods = self._pod_names(obj)
        # Every page of the namespace's events: one page of 1,000 was the first 1,000 by name, and a busy
        # namespace's other events could crowd a job's out.
        try:
            found = [
                _event(e)
                for page in self.kube.list_pages(f"/api/v1/namespaces/{namespace}/events", EVENTS_PAGE)
                for e in page.get("items", [])
                if _about(e, kind, obj, pods)
            ]
        except ApiError as error:
            raise PageError(f"cannot read the events of {key}: {error}", 502) from None
        events = sorted(found, key=lambda e: (e["time"] or 0.0, e["reason"]))
        with self._lock:
            self._events[key] = (time.monotonic(), events)
        return events

    def log_tail(self, key: str, pod: str, lines: int) -> list[str]:
        namespace, _ = _split(key)
        _, view = self.job(key)
        names = [p["name"] for p in (view.get("status") or {}).get("pods", [])]
        if pod not in names:
            raise PageError(f"job {key} has no pod {pod!r} (pods: {', '.join(names) or 'none'})", 404)
        current = self.pods.get(namespace, pod)
        if current is not None and not owned_by(current, view["metadata"].get("uid")):
            return []  # another job's pod of that name (this job's is not there now)
        container = ((current or {}).get("spec", {}).get("containers") or [{}])[0].get("name")
        query: dict[str, Any] = {"tailLines": lines, **({"container": container} if container else {})}
        try:
            return self.kube.text(f"/api/v1/namespaces/{namespace}/pods/{pod}/log", **query).splitlines()
        except ApiError as error:
            if error.status in (400, 404):  # not started yet, or gone
                return []
            raise PageError(f"cannot read the log of {pod}: {error}", 502) from None

    def scale(self, key: str, role: str, replicas: int) -> str:
        kind, obj = self._find(key)
        job = _model(obj, kind)
        if job is None:
            raise PageError(f"job {key}: its spec is not valid; see its status", 409)
        try:
            refusal = scale_refusal(job, role, replicas)
        except ValueError as error:
            raise PageError(str(error)) from None
        if refusal is not None:
            raise PageError(refusal)
        phase = (obj.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed", "Timeout"):
            raise PageError(f"job {job.name} has ended ({phase}); it cannot be scaled")
        field, spelled = _replica_field(obj, role)
        meta = obj["metadata"]
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                 "spec": {field: {spelled: {"replicas": replicas}}}}  # fmt: skip
        try:
            self.kube.patch(kind.path(meta["namespace"], meta["name"]), patch)
        except ApiError as error:
            raise PageError(f"job {key}: {error}", 409 if error.status == 409 else 502) from None
        return f"job {key}: role {spelled} scaled to {replicas}"

    def chaos(self, action: str, target: str, exit_code: int | None) -> str:
        raise PageError("no chaos on Kubernetes: use kubectl (delete --force, drain, ...)")

    def submit(self, draft: Draft) -> Created:
        job = draft.job.job
        document = draft.document
        wanted = (document.get("apiVersion"), document.get("kind"))
        kind = next((k for k in self.kinds.values() if (k.api_version, k.kind) == wanted), None)
        if kind is None:
            served = ", ".join(f"{k.kind}s" for k in self.kinds.values())
            hint = " (trainguard operator --pytorchjobs serves them)" if wanted[1] == PYTORCHJOB.kind else ""
            raise PageError(f"this operator does not serve {wanted[1]}s{hint}; it serves {served}")
        namespace = job.metadata.namespace
        if self.watched is not None and namespace != self.watched:
            raise PageError(
                f"metadata.namespace {namespace!r}: this operator watches namespace {self.watched!r} only; "
                "create the job there"
            )
        key = f"{namespace}/{job.name}"
        try:
            self.kube.create(kind.path(namespace), document)
        except ApiError as error:
            if error.status == 409:
                raise PageError(f"job {key} exists already", 409) from None
            if error.status == 403:
                raise PageError(
                    f"the operator may not create {kind.plural} in {namespace} (its ClusterRole needs create on "
                    f"them): {error.message}",
                    403,
                ) from None
            raise PageError(f"cannot create {kind.kind} {key}: {error}", 502) from None
        return Created(key, f"{kind.kind} {key} created")

    # ---- helpers -----------------------------------------------------------------------------------

    def _find(self, key: str) -> tuple[JobKind, Obj]:
        namespace, name = _split(key)
        for kind, cache in self.caches.items():
            obj = cache.get(namespace, name)
            if obj is not None:
                return self.kinds[kind], obj
        raise PageError(f"no job {key!r}", 404)

    def _view(self, obj: Obj) -> dict[str, Any]:
        """The resource, its pods' last exit filled in from the pods themselves (the status does not keep it)."""
        status = dict(obj.get("status") or {})
        pods = []
        for pod in status.get("pods") or []:
            current = self._own_pod(obj, pod["name"])
            pods.append({**pod, **_last_exit(current)} if current is not None else pod)
        status["pods"] = pods
        return {**obj, "status": status}

    def _own_pod(self, obj: Obj, name: str) -> Obj | None:
        """The job's pod of this name, if it has one now (by uid: a pod of that name may be another job's)."""
        meta = obj["metadata"]
        current = self.pods.get(meta["namespace"], name)
        return current if current is not None and owned_by(current, meta.get("uid")) else None

    def _pod_names(self, obj: Obj) -> set[str]:
        """The names of the job's pods: those its status lists, and those it owns now (its rendezvous store's
        among them)."""
        meta = obj["metadata"]
        names = {str(pod.get("name")) for pod in (obj.get("status") or {}).get("pods") or []}
        for pod in self.pods.select(meta["namespace"], {LABEL_JOB: meta["name"]}):
            if owned_by(pod, meta.get("uid")):
                names.add(pod["metadata"]["name"])
        return names


def _model(obj: Obj, kind: JobKind) -> TrainingJob | None:
    meta = obj.get("metadata") or {}
    document = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels", "annotations") if k in meta},
        "spec": obj.get("spec"),
    }
    try:
        return load_object(document, f"{kind.plural}/{meta.get('namespace')}/{meta.get('name')}").job
    except (SpecError, ValueError):
        return None


def _split(key: str) -> tuple[str, str]:
    namespace, slash, name = key.partition("/")
    if not slash or not namespace or not name:
        raise PageError(f"no job {key!r}: jobs are named <namespace>/<name> here", 404)
    return namespace, name


def _about(event: Obj, kind: JobKind, job: Obj, pods: set[str]) -> bool:
    """Whether an event is the job's: about the job itself (by uid, where the event has it: not an earlier job
    of its name), about one of its pods (by name: ``pods``), or about an object named after it (its Service,
    its PodGroup). Never by a prefix of the name: the pods of ``train-big`` are not ``train``'s."""
    involved = event.get("involvedObject") or {}
    name = involved.get("name")
    if involved.get("kind") == "Pod":
        return name in pods
    if involved.get("kind") == kind.kind and involved.get("uid"):
        return bool(involved["uid"] == job["metadata"].get("uid"))
    return bool(name == job["metadata"]["name"])


def _event(event: Obj) -> dict[str, Any]:
    stamp = (
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
    )
    return {
        "time": parse_time(stamp) if isinstance(stamp, str) else None,
        "type": event.get("type", ""),
        "reason": event.get("reason", ""),
        "object": (event.get("involvedObject") or {}).get("name", ""),
        "message": event.get("message", ""),
    }


def _last_exit(pod: Obj) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    if not statuses:
        return {}
    state = statuses[0].get("state") or {}
    ended = state.get("terminated") or (statuses[0].get("lastState") or {}).get("terminated")
    if not ended:
        return {}
    found: dict[str, Any] = {"exitCode": ended.get("exitCode")}
    if ended.get("reason"):
        found["reason"] = ended["reason"]
    return found


def _replica_field(obj: Obj, role: str) -> tuple[str, str]:
    """Where the resource keeps ``role``'s replica spec: (the field of spec, the role as the resource spells it)."""
    spec = obj.get("spec") or {}
    for field in _REPLICA_SPECS:
        for spelled in spec.get(field) or {}:
            if spelled.lower() == role.lower():
                return field, spelled
    raise PageError(f"job {obj['metadata']['name']} has no role {role!r}")
