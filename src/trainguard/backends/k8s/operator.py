"""The operator: watches jobs (every served kind), their pods and the nodes, and reconciles each job that
changed with the same controller as every other backend.

Level-triggered: a reconcile reads the job and its status from the API server's view (the watch caches),
decides with ``trainguard.controller.reconcile`` and applies the actions through ``JobBackend``. All it
needs is in the job's status, so an operator killed at any moment, or a second replica taking over, picks
up where the last write left off. Only the replica holding the Lease acts. A job larger than the operator
runs is held (``held``): its status says why, and it is not reconciled until it fits.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from trainguard.api import SpecError, TrainingJob
from trainguard.api.load import load_object
from trainguard.backends.k8s import agentreports, delivery, held, isolation, manifests, metadata, nodechecker
from trainguard.backends.k8s.backend import JobBackend
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.events import EventSender, event_body, post_event
from trainguard.backends.k8s.fields import CHECKER_POD_FIELDS, JOB_FIELDS, NODE_FIELDS, POD_FIELDS
from trainguard.backends.k8s.kinds import DEFAULT_KINDS, JobKind
from trainguard.backends.k8s.leader import LeaderElection
from trainguard.backends.k8s.observe import is_ours
from trainguard.backends.k8s.queue import WorkQueue
from trainguard.backends.k8s.shared import Shared
from trainguard.backends.k8s.status import read_status, status_document, without_status
from trainguard.controller import JobStatus, SettledSlots, reconcile
from trainguard.controller.admission import Hold, admit
from trainguard.controller.backend import EmitEvent, EventType, IsolationMode
from trainguard.controller.launchspec import check_runnable
from trainguard.controller.loop import StepResult
from trainguard.controller.retries import BACKOFF_MAX
from trainguard.observability.metrics import ControllerStats

if TYPE_CHECKING:
    from trainguard.ui import server as ui_server

Obj = dict[str, Any]
JobKey = tuple[str, str, str]  # kind, namespace, name
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    namespace: str | None = None
    kinds: Sequence[JobKind] = DEFAULT_KINDS
    #: How every pod is dressed: its schedulerName, the image the agent is copied from.
    pod_settings: manifests.PodSettings = field(default_factory=manifests.PodSettings)
    #: Jobs decided and applied at once, within ``requests_in_flight``. More is not faster where the API server is
    #: the limit: each pod's change is then a reconcile and a status write of its own rather than one for several
    #: (benchmarks/results/k8s_scale-workers-*.json: 100 nodes, 50 jobs, 4 workers the fastest or near it, 16 the
    #: slowest, with the most memory).
    workers: int = 4
    #: Requests out to the API server at once, from all the operator's threads together (watches and the leader
    #: election's renewals aside); None: no bound.
    requests_in_flight: int | None = 20
    lease_namespace: str = "default"
    lease_name: str = "trainguard-operator"
    identity: str = ""
    #: Every job is reconciled at least this often, whatever the watches say.
    resync_seconds: float = 30.0
    #: Serve Prometheus metrics on this port (0: any free one; None: not at all), on ``metrics_address``.
    metrics_port: int | None = None
    metrics_address: str = "127.0.0.1"
    #: Take the agents' reports on this port (0: any free one; None: not at all), on ``agent_report_address``.
    agent_report_port: int | None = None
    agent_report_address: str = "127.0.0.1"
    #: Serve the job pages on this port (0: any free one; None: not at all), on ``ui_address``; sessions
    #: opened with ``ui_secret`` may act (scale).
    ui_port: int | None = None
    ui_address: str = "127.0.0.1"
    ui_secret: str | None = None
    #: Seconds an isolated node stays isolated before it is released on probation (``policy.cooldown``);
    #: 0: until an administrator releases it.
    isolation_cooldown: float = 0.0
    #: Which pods are the node checker's, and its bound: read where ``pod_settings.isolation`` is
    #: ``NODE_CHECKER`` (only its checks isolate).
    node_checker: nodechecker.NodeChecker = field(default_factory=nodechecker.NodeChecker)


class Operator:
    def __init__(self, kube: Kube, options: Options, clock: Callable[[], float] = time.time) -> None:
        leader_kube = kube.unbounded()
        if options.requests_in_flight is not None:
            kube = kube.bounded(options.requests_in_flight)
        self.kube = kube
        self.options = options
        self.clock = clock
        self.queue: WorkQueue[JobKey] = WorkQueue()
        #: Slots found settled, skipped by the next reconciles (the controller's memory, owned here).
        self.settled = SettledSlots()
        self.kinds = {kind.kind: kind for kind in options.kinds}
        ns = options.namespace
        # Each cache keeps only the fields the operator reads of its objects (``fields``).
        self.jobs = {
            kind.kind: Cache(kube, kind.path(ns), self._job_changed(kind), fields=JOB_FIELDS)
            for kind in options.kinds
        }
        pods_path = f"/api/v1/namespaces/{ns}/pods" if ns else "/api/v1/pods"
        self.pods = Cache(
            kube,
            pods_path,
            self._pod_changed,
            label_selector=metadata.LABEL_JOB,
            index_label=metadata.LABEL_JOB,
            fields=POD_FIELDS,
        )
        self.nodes = Cache(kube, "/api/v1/nodes", self._node_changed, fields=NODE_FIELDS)
        #: The node checker's pods, where only its checks isolate; the checks acted on (node -> the check's time).
        self.checkers: Cache | None = None
        self._checked = threading.Event()
        self._acted: dict[str, float] = {}
        if options.pod_settings.isolation is IsolationMode.NODE_CHECKER:
            checker = options.node_checker
            self.checkers = Cache(
                kube,
                checker.pods_path,
                lambda obj, now: self._checked.set(),
                label_selector=checker.label_selector,
                fields=CHECKER_POD_FIELDS,
            )
        identity = options.identity or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.shared = Shared(
            kube,
            self.pods,
            self.nodes,
            settings=options.pod_settings,
            clock=clock,
            identity=identity,
            events=EventSender(kube),
        )
        self.leader = LeaderElection(leader_kube, options.lease_namespace, options.lease_name, identity)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.stats = ControllerStats()
        self.metrics_url: str | None = None
        self.agent_report_url: str | None = None
        self._report_server: ThreadingHTTPServer | None = None
        self.ui: ui_server.Endpoint | None = None

    # ---- running -----------------------------------------------------------------------------------

    @property
    def caches(self) -> tuple[Cache, ...]:
        return (*self.jobs.values(), self.pods, self.nodes, *((self.checkers,) if self.checkers else ()))

    def start(self) -> None:
        for cache in self.caches:
            cache.start()
        # The metrics and the pages are imported only where they are served: an operator without them starts lighter.
        if self.options.metrics_port is not None:
            from trainguard.backends.k8s import metrics
            from trainguard.observability.prometheus import JobsCollector

            jobs = metrics.snapshots(lambda: [obj for cache in self.jobs.values() for obj in cache.items()])
            collector = JobsCollector(jobs, self.stats)
            self.metrics_url = metrics.serve(
                self.options.metrics_port, self.options.metrics_address, collector
            )
        if self.options.agent_report_port is not None:
            self._report_server, self.agent_report_url = agentreports.serve(
                agentreports.AgentReports(self.kube, self.pods, nodes=self.nodes),
                self.options.agent_report_port,
                self.options.agent_report_address,
            )
            log.info("agent reports at %s", self.agent_report_url)
        if self.options.ui_port is not None:
            from trainguard.backends.k8s.ui import KubeSource
            from trainguard.ui import server as ui_server

            source = KubeSource(self.kube, self.kinds, self.jobs, self.pods, self.options.namespace)
            self.ui = ui_server.serve(
                source, self.options.ui_address, self.options.ui_port, self.options.ui_secret
            )
        settings = self.options.pod_settings
        log.info(
            "fault tolerance check: %s", nodechecker.mode_words(settings.isolation, self.options.node_checker)
        )
        log.info(
            "isolated nodes: %s",
            f"released on probation after a cool-down of {self.options.isolation_cooldown:g} s, doubled each "
            "time a node is isolated again (--isolation-cooldown)"
            if self.options.isolation_cooldown > 0
            else "isolated until an administrator releases them (trainguard node release; --isolation-cooldown "
            "releases them on probation after a cool-down)",
        )
        fencing = settings.fencing if settings.report_url else None
        log.info(
            "fencing: %s",
            f"a pod on a node that is not Ready is replaced {fencing.seconds:g} s after the decision; every pod's "
            f"agent ends its workers after {fencing.agent_bound:g} s without a lease renewal (--fence-seconds)"
            if fencing is not None
            else "off: a pod on a node that is not Ready is replaced at once (--fence-seconds, --agent-report-url)",
        )
        log.info("agent delivery: %s", delivery.words(settings.agent_delivery))
        if settings.fault_injection:
            log.warning(
                "fault injection on (--fault-injection, a test aid): every pod's checks read the items that the "
                "ConfigMap %s of its namespace lists for its node as faulty",
                manifests.FAULT_INJECT_CONFIG_MAP,
            )
        self.leader.start()
        for number in range(self.options.workers):
            thread = threading.Thread(target=self._work, name=f"reconcile-{number}", daemon=True)
            thread.start()
            self._threads.append(thread)
        resync = threading.Thread(target=self._resync, name="resync", daemon=True)
        resync.start()
        if self.checkers is not None:
            checking = threading.Thread(
                target=self._node_checks, args=(self.checkers,), name="node-checks", daemon=True
            )
            checking.start()
            self._threads.append(checking)
        if self.options.isolation_cooldown > 0:
            cooling = threading.Thread(target=self._cool_down, name="cool-down", daemon=True)
            cooling.start()
            self._threads.append(cooling)
        self._threads.append(resync)

    def stop(self) -> None:
        self._stop.set()
        self.queue.close()
        for thread in self._threads:
            thread.join(timeout=10)
        self.leader.stop()
        if self._report_server is not None:
            self._report_server.shutdown()
            self._report_server.server_close()
        if self.ui is not None:
            self.ui.close()
        for cache in self.caches:
            cache.stop()
        self.shared.pool.shutdown(wait=False)
        if self.shared.events is not None:
            self.shared.events.close()

    def synced(self) -> bool:
        return all(cache.synced.is_set() for cache in self.caches)

    # ---- what to reconcile -------------------------------------------------------------------------

    def _job_changed(self, kind: JobKind) -> Callable[[Obj, Obj | None], None]:
        def changed(obj: Obj, now: Obj | None) -> None:
            meta = obj["metadata"]
            # A job with no status yet has never been reconciled: its pods go out before other reconciles.
            self.queue.add(
                (kind.kind, meta["namespace"], meta["name"]), first=now is not None and not obj.get("status")
            )

        return changed

    def _pod_changed(self, obj: Obj, now: Obj | None) -> None:
        labels = obj["metadata"].get("labels") or {}
        kind = labels.get(metadata.LABEL_KIND)
        job = labels.get(metadata.LABEL_JOB)
        if now is None:
            self.shared.remember_disruption(obj)
        # The rendezvous store's pod too: the job's reconcile creates it again when it is lost.
        if kind in self.kinds and job and (is_ours(obj) or metadata.is_rendezvous(obj)):
            self.queue.add((kind, obj["metadata"]["namespace"], job))

    def _node_changed(self, obj: Obj, now: Obj | None) -> None:
        if not self.shared.node_changed(obj, now):
            return
        name = obj["metadata"]["name"]
        for pod in self.pods.items():
            if (pod.get("spec") or {}).get("nodeName") == name:
                self._pod_changed(pod, pod)

    def _resync(self) -> None:
        while not self._stop.wait(self.options.resync_seconds):
            self.enqueue_all()

    def _cool_down(self) -> None:
        """Isolated nodes whose cool-down is over released on probation, looked at every quarter of the
        cool-down (between 1 and 30 s), by the leader alone."""
        base = self.options.isolation_cooldown
        while not self._stop.wait(max(1.0, min(30.0, base / 4))):
            if not self.leader.is_leader() or not self.synced():
                continue
            try:
                released = isolation.release_cooled(self.kube, self.nodes.items(), base, self.clock())
            except Exception as error:  # the API server refused (RBAC, a conflict): the next look tries again
                log.warning("releasing the nodes whose cool-down is over failed: %s", error)
                continue
            for name in released:
                log.info("node %s released on probation after its cool-down", name)

    def _node_checks(self, checkers: Cache) -> None:
        """The node checker's checks decided and carried out (``nodechecker.look``) by the leader alone, at each
        change of a checker pod and every 10 s."""
        while not self._stop.is_set():
            self._checked.wait(10.0)
            if self._stop.is_set():
                return
            if not self.leader.is_leader() or not self.synced():
                self._stop.wait(1.0)
                continue
            self._checked.clear()
            try:
                self._acted = dict(
                    nodechecker.look(
                        self.kube,
                        checkers.items(),
                        self.options.node_checker,
                        self.shared.isolated_nodes(),
                        self._acted,
                        self.clock(),
                    )
                )
            except Exception as error:  # the API server could not be reached: the next look tries again
                log.warning("deciding the node checker's checks failed: %s", error)

    def enqueue_all(self) -> None:
        for kind, cache in self.jobs.items():
            for obj in cache.items():
                self.queue.add((kind, obj["metadata"]["namespace"], obj["metadata"]["name"]))

    # ---- reconciling -------------------------------------------------------------------------------

    def _work(self) -> None:
        while not self._stop.is_set():
            key = self.queue.get(timeout=1.0)
            if key is None:
                continue
            self.stats.set_queue_depth(len(self.queue))
            try:
                if not self.leader.is_leader() or not self.synced():
                    self.queue.add_after(key, 1.0)  # not ours to act on (yet)
                    continue
                started = time.monotonic()
                self.reconcile(key)
                self.stats.observe(time.monotonic() - started)
            except Exception as error:
                self.stats.failed()
                self._failed(key, error)
            else:
                self.queue.forget(key)
            finally:
                self.queue.done(key)

    def _failed(self, key: JobKey, error: Exception) -> None:
        """A reconcile that raised: try the job again after its backoff (``WorkQueue.backoff``), with one log
        line per step (the traceback the first time) and a Warning event on the job saying when."""
        failures, delay = retry = self.queue.backoff(key)
        retry.log(log, "reconcile of {}/{}/{}".format(*key), error)
        kind_name, namespace, name = key
        obj = self.jobs[kind_name].get(namespace, name)
        if obj is None:
            return
        uid = obj["metadata"].get("uid") or ""
        message = (
            f"reconciling the job failed ({failures} in a row): {type(error).__name__}: {error}; the operator "
            f"tries again in {delay:.0f} s, and backs off up to {BACKOFF_MAX:.0f} s while it keeps failing"
        )
        # One event per kind of error and step of the backoff: the same failure again is not a new event.
        action = EmitEvent(f"{uid}/reconcile-failed/{type(error).__name__}/{min(failures, 10)}",
                           EventType.WARNING, "ReconcileFailed", message, self.clock())  # fmt: skip
        body = event_body(self.kinds[kind_name], namespace, name, uid, action, self.shared.identity)
        try:
            post_event(self.kube, body)  # said before (409): done
        except ApiError as event_error:
            log.warning("%s/%s: cannot record the failure: %s", namespace, name, event_error)

    def reconcile(self, key: JobKey) -> None:
        kind_name, namespace, name = key
        kind = self.kinds[kind_name]
        obj = self.jobs[kind_name].get(namespace, name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return  # deleted: garbage collection removes its pods through their owner references
        source = f"{kind.plural}/{namespace}/{name}"
        try:
            job = load_object(without_status(obj), source).job
            check_runnable(job)
        except SpecError as error:
            self._reject(kind, obj, str(error))
            return
        except ValueError as error:  # a torchrun command that cannot run (LaunchError)
            self._reject(kind, obj, f"{source}: {error}")
            return
        status = read_status(obj)
        admission = admit(job, status, held.LIMIT, lambda over: held.explain(kind, over), self.clock())
        if isinstance(admission, Hold):
            self._hold(kind, obj, job, admission)
            return  # not again until the job changes: the watch brings the edit that makes it fit
        if admission.fresh:  # held until now: it starts from nothing, as a new job
            status = JobStatus()
        backend = JobBackend(self.shared, kind, obj)
        now = self.clock()
        result = reconcile(job, status, backend.observe(job), now, self.settled)
        if not self.leader.is_leader():
            return
        applied = backend.apply(job, result.actions)
        if backend.written is not None:
            self.jobs[kind_name].put(backend.obj)
        # After a conflict, at once: the watch brings the newer status, and the job is decided again from it.
        again = StepResult.of(result, applied).again_at(self.clock())
        if again is not None:
            self.queue.add_after(key, again - self.clock())

    def _reject(self, kind: JobKind, obj: Obj, message: str) -> None:
        """A job the model refuses: say why in its status (once) rather than retrying forever."""
        meta = obj["metadata"]
        status = obj.get("status") or {}
        if status.get("phase") == "Failed" and status.get("message") == message:
            return
        body = {**obj, "status": {"phase": "Failed", "reason": "InvalidSpec", "message": message}}
        try:
            self.kube.replace(kind.path(meta["namespace"], meta["name"], "status"), body)
        except ApiError as error:
            log.warning("%s/%s: cannot record the spec error: %s", meta["namespace"], meta["name"], error)

    def _hold(self, kind: JobKind, obj: Obj, job: TrainingJob, holding: Hold) -> None:
        """A job too large to run (``held``): its status and one Warning event say why, once per size; a
        failed write raises (the operator's backoff tries again), a conflict waits for the newer version."""
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if holding.event is None or not self.leader.is_leader():
            return  # said already
        if holding.status is not None:
            document = status_document(kind, job, holding.status)
            try:
                written = self.kube.replace(kind.path(namespace, name, "status"), {**obj, "status": document})
            except ApiError as error:
                if error.status in (404, 409):
                    return  # deleted, or changed meanwhile: the watch brings the newer version
                raise
            self.jobs[kind.kind].put(written)
        body = event_body(
            kind, namespace, name, str(meta.get("uid") or ""), holding.event, self.shared.identity
        )
        try:
            self.kube.create(f"/api/v1/namespaces/{namespace}/events", body)
        except ApiError as error:
            if error.status != 409:  # 409: said before
                log.warning("%s/%s: cannot record why the job is held: %s", namespace, name, error)
            return
        log.warning("%s/%s held: %s", namespace, name, holding.message)
