"""The controller's backend interface (``trainguard.controller.backend``) over local processes.

``observe`` shows the job's pod rows (which the runtime keeps up to date with their processes, as a kubelet
does, before each reconcile) and their agents' reports as the controller expects, changing nothing; ``apply``
carries actions out through the one applier (``trainguard.controller.apply``) with the local verbs. Idempotency comes from the rows themselves: a launch of a
generation the row already has, or a termination of one it no longer has, does nothing; events and the
status carry their keys into the store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from trainguard.api import TrainingJob
from trainguard.backends.local import discovery, nudge
from trainguard.backends.local.home import Home
from trainguard.backends.local.nodes import isolate
from trainguard.backends.local.placement import free_of
from trainguard.backends.local.podenv import network
from trainguard.backends.local.records import EventRecord, JobRecord, PodRecord, PodState
from trainguard.backends.local.reports import Report
from trainguard.backends.local.runtime import Runtime
from trainguard.backends.local.statefile import Conflict
from trainguard.backends.local.store import Store
from trainguard.controller.apply import ErrorLog, apply_actions, in_order
from trainguard.controller.backend import (
    Action,
    ActionError,
    Applied,
    EmitEvent,
    IsolateNode,
    LaunchPod,
    NudgeSurvivors,
    Observed,
    ObservedNode,
    ObservedPhase,
    ObservedPod,
    ReleaseSurvivors,
    RestartInPlace,
    ScaleRequest,
    StatusConflict,
    TerminatePod,
    UpdateDiscovery,
    WriteStatus,
)
from trainguard.controller.reports import AgentReport
from trainguard.controller.status import JobStatus


class LocalBackend:
    def __init__(self, home: Home, store: Store, runtime: Runtime, clock: Callable[[], float]) -> None:
        self.home = home
        self.store = store
        self.runtime = runtime
        self.clock = clock
        self._errors: dict[str, ErrorLog] = {}
        #: job -> the status version last read, for the compare-and-swap of the next status write.
        self.status_versions: dict[str, int] = {}
        #: job -> its loopback port (rendezvous store and MASTER_PORT), as last read.
        self._ports: dict[str, int] = {}

    # ---- status ------------------------------------------------------------------------------------

    def read_status(self, record: JobRecord) -> JobStatus:
        """The job's stored status; remembers its version for the next ``WriteStatus`` (and its port)."""
        self.status_versions[record.name] = record.status_version
        self._ports[record.name] = record.port
        return JobStatus.from_dict(record.status) if record.status else JobStatus()

    def errors_of(self, job: str) -> ErrorLog:
        """The job's failed actions (``observe`` reports them)."""
        log = self._errors.get(job)
        if log is None:
            log = self._errors[job] = ErrorLog()
        return log

    # ---- observe -----------------------------------------------------------------------------------

    def observe(self, job: TrainingJob) -> Observed:
        rows = self.runtime.rows(job.name)  # as the runtime's refresh just left them (``Runtime.refresh``)
        nodes = self.store.list_nodes()
        free = free_of(nodes, self.store.slots_in_use())
        return Observed(
            pods=tuple(self._pod(row) for row in rows if _visible(row)),
            nodes=tuple(ObservedNode(node.name, node.ready, max(free[node.name], 0)) for node in nodes),
            scale_requests=tuple(
                ScaleRequest(request_id, role, replicas, at)
                for request_id, role, replicas, at in self.store.scale_requests(job.name)
            ),
            errors=self.errors_of(job.name).errors(),
            network=network(self._port(job.name)),
            node_count=len(nodes),
            isolated_nodes=frozenset(node.name for node in nodes if node.isolated),
        )

    def _port(self, job: str) -> int:
        port = self._ports.get(job)
        if port is None:
            record = self.store.get_job(job)
            port = self._ports[job] = record.port if record is not None else 0
        return port

    def _pod(self, row: PodRecord) -> ObservedPod:
        # A pod still waiting for a slot has never started, so it has no report yet (nothing to read).
        report = Report() if row.state is PodState.PENDING else self.runtime.report(row)
        # An agent that ended before it started the command (its pre-check failed) has its word too. The row
        # counts the restarts in place the controller answered (``Runtime.acknowledge_in_place``).
        heard = report.started or report.exited
        agent = AgentReport.from_summary(report.summary, row.in_place_acked) if heard else None
        started_at, exit_code, signal, reason = row.started_at, None, None, None
        if row.state is PodState.EXITED:
            phase = ObservedPhase.SUCCEEDED if row.exit_code == 0 else ObservedPhase.FAILED
            exit_code, signal, reason = row.exit_code, row.signal, row.reason
        elif row.state is PodState.LOST:  # its node went down with it, or it vanished
            phase, reason = ObservedPhase.UNKNOWN, row.reason
        elif row.state in (PodState.PENDING, PodState.LAUNCHING) or not report.started:
            # Running means the training command runs: until the agent has started it, the pod is creating.
            phase = ObservedPhase.PENDING
        else:
            phase, started_at = ObservedPhase.RUNNING, report.started_at or row.started_at
        return ObservedPod(
            name=row.name,
            role=row.role,
            index=row.index,
            generation=row.launch,
            phase=phase,
            node=row.node or None,
            exit_code=exit_code,
            signal=signal,
            reason=reason,
            started_at=started_at,
            terminating=row.state is PodState.TERMINATING,
            overdue=row.state is PodState.TERMINATING and self._past(row.stop_deadline),
            agent=agent,
        )

    def _past(self, deadline: float | None) -> bool:
        return deadline is not None and self.clock() >= deadline

    # ---- apply -------------------------------------------------------------------------------------

    def apply(self, job: TrainingJob, actions: Sequence[Action]) -> Applied:
        record = self.store.get_job(job.name)
        if record is None:
            return Applied()
        return apply_actions(LocalVerbs(self, record, job), actions)


class LocalVerbs:
    """The local runtime's hands for one job and one batch (``trainguard.controller.apply``)."""

    failures: tuple[type[Exception], ...] = (OSError, ValueError)

    def __init__(self, backend: LocalBackend, record: JobRecord, job: TrainingJob) -> None:
        self.backend = backend
        self.runtime = backend.runtime
        self.record = record
        self.job = job

    def now(self) -> float:
        return self.backend.clock()

    def keep_error(self, error: ActionError) -> None:
        self.backend.errors_of(self.job.name).add(error)

    def batch(self, actions: Sequence[Action]) -> AbstractContextManager[object]:
        return self.runtime.placing()  # one look at the nodes for all of this reconcile's launches

    def before_launches(self) -> None:
        pass  # a local pod needs nothing made before it

    def beside_launches(self) -> Sequence[Callable[[], None]]:
        return ()

    side_by_side = staticmethod(in_order)

    def launch(self, action: LaunchPod) -> None:
        self.runtime.launch(
            self.record,
            self.job,
            action.pod,
            action.role,
            action.index,
            action.generation,
            action.restart_count,
            action.spec,
            action.avoid_nodes,
        )

    def terminate(self, action: TerminatePod) -> None:
        self.runtime.terminate(self.job, action.pod, action.generation, action.force)

    def restart_in_place(self, action: RestartInPlace) -> None:
        # The agent restarts a hung command by itself; the controller's answer is what counts it as done.
        self.runtime.acknowledge_in_place(self.record.name, action.pod, action.generation, action.attempt)

    def nudge(self, action: NudgeSurvivors) -> None:
        """Hand the failure to each survivor's agent through the nudge file of its launch (as the operator
        does through an annotation, ``trainguard.backends.local.nudge``); one Nudged event per pod. The agent
        restarts the workers and leaves their ends out of its report: nothing of it lives in this process."""
        backend, record = self.backend, self.record
        for name in action.pods:
            row = backend.store.get_pod(name)
            if row is None or row.job != record.name or row.state is not PodState.RUNNING:
                continue
            nudge.write(
                backend.home.nudge_file(record.name, row.name, row.launch), action.token, action.failed_at
            )
            message = (
                f"nudged for {action.token}: the pod's agent was asked to restart its workers started before "
                f"{action.failed_pod} failed, into a new torchrun round"
            )
            event = EventRecord(record.name, backend.clock(), "Normal", "Nudged", name, message)
            backend.store.append_event_once(f"{action.key}/{name}", event)

    def release(self, action: ReleaseSurvivors) -> None:
        # Never decided here (observe says ReleaseMode.NONE): every pod has the one loopback address.
        raise ValueError(
            "the local runtime's pods share one address: no peer's connections can be told apart"
        )

    def isolate_node(self, action: IsolateNode) -> None:
        """The virtual node takes no pod again until ``trainguard node release`` (any job's, later ones too);
        its pods that run go on (the controller ends those it decided to)."""
        isolate(self.backend.store, action.node, f"{self.record.name}/{action.pod}: {action.reason}")
        event = EventRecord(
            self.record.name, self.backend.clock(), "Warning", "NodeIsolated", action.node, action.reason
        )
        self.backend.store.append_event_once(action.key, event)

    def update_discovery(self, action: UpdateDiscovery) -> None:
        discovery.write(self.backend.home.discovery_script(self.record.name), action.version, action.hosts)

    def emit_event(self, action: EmitEvent) -> None:
        name = self.record.name
        event = EventRecord(
            name, action.at, action.type.value, action.reason, action.pod or name, action.message
        )
        self.backend.store.append_event_once(action.key, event)

    def write_status(self, action: WriteStatus) -> None:
        backend, record, status = self.backend, self.record, action.status
        expected = backend.status_versions.get(record.name, record.status_version)
        try:
            backend.status_versions[record.name] = backend.store.update_status(
                record.name, status.to_dict(), expected
            )
        except Conflict:
            # Someone else wrote the status since we read it: the next reconcile starts from theirs.
            backend.status_versions.pop(record.name, None)
            raise StatusConflict(f"job {record.name}: its status was written since it was read") from None
        handled = set(status.handled_scale_requests)
        pending = {rid for rid, *_ in backend.store.scale_requests(record.name) if rid not in handled}
        backend.store.drop_scale_requests(record.name, keep=pending)


def _visible(row: PodRecord) -> bool:
    """Deleted pods are gone from the controller's view, like a pod removed from the API server."""
    return row.state is not PodState.DELETED
