"""The controller's backend interface (``trainguard.controller.backend``) over local processes.

``observe`` refreshes the job's pod rows from their processes and agent reports and shows them as the
controller expects; ``apply`` carries actions out. Idempotency comes from the rows themselves: a launch of a
generation the row already has, or a termination of one it no longer has, does nothing; events and the
status carry their keys into the store.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace

from trainguard.api import TrainingJob
from trainguard.backends.local import discovery
from trainguard.backends.local.home import Home
from trainguard.backends.local.nudge import restart_workers
from trainguard.backends.local.placement import free_of
from trainguard.backends.local.podenv import network
from trainguard.backends.local.records import EventRecord, JobRecord, PodRecord, PodState
from trainguard.backends.local.reports import Report
from trainguard.backends.local.runtime import Runtime
from trainguard.backends.local.store import Conflict, Store
from trainguard.controller.backend import (
    Action,
    ActionError,
    AgentReport,
    EmitEvent,
    LaunchPod,
    NudgeSurvivors,
    Observed,
    ObservedNode,
    ObservedPhase,
    ObservedPod,
    RestartInPlace,
    ScaleRequest,
    TerminatePod,
    UpdateDiscovery,
    WriteStatus,
)
from trainguard.controller.status import JobStatus

#: Failed actions kept per job for the controller to see.
_MAX_ERRORS = 50


class LocalBackend:
    def __init__(self, home: Home, store: Store, runtime: Runtime, clock: Callable[[], float]) -> None:
        self.home = home
        self.store = store
        self.runtime = runtime
        self.clock = clock
        self._errors: dict[str, deque[ActionError]] = {}
        #: job -> the status version last read, for the compare-and-swap of the next status write.
        self._status_versions: dict[str, int] = {}
        #: job -> its loopback port (rendezvous store and MASTER_PORT), as last read.
        self._ports: dict[str, int] = {}
        #: (pod, launch) -> the workers SIGKILLed for nudges (torchrun's restart after them is no fault).
        self._nudged: dict[tuple[str, int], frozenset[int]] = {}

    # ---- status ------------------------------------------------------------------------------------

    def read_status(self, record: JobRecord) -> JobStatus:
        """The job's stored status; remembers its version for the next ``WriteStatus`` (and its port)."""
        self._status_versions[record.name] = record.status_version
        self._ports[record.name] = record.port
        return JobStatus.from_dict(record.status) if record.status else JobStatus()

    # ---- observe -----------------------------------------------------------------------------------

    def observe(self, job: TrainingJob) -> Observed:
        rows = self.runtime.refresh(job.name)
        nodes = self.store.list_nodes()
        free = free_of(nodes, self.store.slots_in_use())
        return Observed(
            pods=tuple(self._pod(row) for row in rows if _visible(row)),
            nodes=tuple(ObservedNode(node.name, node.ready, max(free[node.name], 0)) for node in nodes),
            scale_requests=tuple(
                ScaleRequest(request_id, role, replicas, at)
                for request_id, role, replicas, at in self.store.scale_requests(job.name)
            ),
            errors=tuple(self._errors.get(job.name, ())),
            network=network(self._port(job.name)),
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
        # The agent restarts a hung command by itself, at once. The controller decides about each hang too
        # (it counts and records them): a hang stays "hung" until the controller has answered it with a
        # RestartInPlace, and only answered restarts are shown as done.
        agent = AgentReport(
            in_place_restarts=min(report.in_place_restarts, row.in_place_acked),
            hung=report.hangs > row.in_place_acked,
            last_progress_at=report.last_progress_at,
            worker_restarts=tuple(
                restart
                for restart, pids in report.worker_restarts
                if not pids <= self._nudged.get((row.name, row.launch), frozenset())
            ),
        )
        pod = ObservedPod(
            name=row.name,
            role=row.role,
            index=row.index,
            generation=row.launch,
            phase=ObservedPhase.RUNNING,
            node=row.node or None,
            started_at=row.started_at,
            agent=agent if report.started else None,
        )
        if row.state is PodState.EXITED:
            phase = ObservedPhase.SUCCEEDED if row.exit_code == 0 else ObservedPhase.FAILED
            return replace(pod, phase=phase, exit_code=row.exit_code, signal=row.signal, reason=row.reason)
        if row.state is PodState.LOST:  # its node went down with it, or it vanished
            return replace(pod, phase=ObservedPhase.UNKNOWN, reason=row.reason)
        if row.state in (PodState.PENDING, PodState.LAUNCHING) or not report.started:
            # Running means the training command runs: until the agent has started it, the pod is creating.
            return replace(pod, phase=ObservedPhase.PENDING, terminating=row.state is PodState.TERMINATING)
        return replace(
            pod, started_at=report.started_at or row.started_at, terminating=row.state is PodState.TERMINATING
        )

    # ---- apply -------------------------------------------------------------------------------------

    def apply(self, job: TrainingJob, actions: Sequence[Action]) -> None:
        record = self.store.get_job(job.name)
        if record is None:
            return
        with self.runtime.placing():  # one look at the nodes for all of this reconcile's launches
            for action in actions:
                try:
                    self._apply_one(record, job, action)
                except (OSError, ValueError) as error:
                    errors = self._errors.setdefault(job.name, deque(maxlen=_MAX_ERRORS))
                    errors.append(ActionError(action.key, str(error), self.clock()))

    def _apply_one(self, record: JobRecord, job: TrainingJob, action: Action) -> None:
        if isinstance(action, LaunchPod):
            self.runtime.launch(
                record,
                job,
                action.pod,
                action.role,
                action.index,
                action.generation,
                action.restart_count,
                action.spec,
                action.avoid_nodes,
            )
        elif isinstance(action, TerminatePod):
            self.runtime.terminate(job, action.pod, action.generation, action.force)
        elif isinstance(action, RestartInPlace):
            self.runtime.acknowledge_in_place(record.name, action.pod, action.generation, action.attempt)
        elif isinstance(action, NudgeSurvivors):
            self._nudge(record, action)
        elif isinstance(action, UpdateDiscovery):
            discovery.write(self.home.discovery_script(record.name), action.version, action.hosts)
        elif isinstance(action, EmitEvent):
            event = EventRecord(
                record.name,
                action.at,
                action.type.value,
                action.reason,
                action.pod or record.name,
                action.message,
            )
            self.store.append_event_once(action.key, event)
        elif isinstance(action, WriteStatus):
            self._write_status(record, action.status)

    def _nudge(self, record: JobRecord, action: NudgeSurvivors) -> None:
        """SIGKILL the workers of each survivor that started before the failure; one Nudged event per pod."""
        for name in action.pods:
            row = self.store.get_pod(name)
            if row is None or row.job != record.name or row.state is not PodState.RUNNING:
                continue
            killed = restart_workers(self.runtime.report(row).child_pid, action.failed_at)
            # torchrun restarts them: no fault of theirs, not recorded as one.
            nudged = self._nudged.get((row.name, row.launch), frozenset())
            self._nudged[(row.name, row.launch)] = nudged | frozenset(killed)
            message = (
                f"nudged for {action.token}: {len(killed)} workers started before {action.failed_pod} failed "
                "were SIGKILLed; torchrun restarts them into a new round"
            )
            event = EventRecord(record.name, self.clock(), "Normal", "Nudged", name, message)
            self.store.append_event_once(f"{action.key}/{name}", event)

    def _write_status(self, record: JobRecord, status: JobStatus) -> None:
        expected = self._status_versions.get(record.name, record.status_version)
        try:
            self._status_versions[record.name] = self.store.update_status(
                record.name, status.to_dict(), expected
            )
        except Conflict:
            # Someone else wrote the status since we read it: drop ours; the next reconcile starts from theirs.
            self._status_versions.pop(record.name, None)
            return
        handled = set(status.handled_scale_requests)
        pending = {rid for rid, *_ in self.store.scale_requests(record.name) if rid not in handled}
        self.store.drop_scale_requests(record.name, keep=pending)


def _visible(row: PodRecord) -> bool:
    """Deleted pods are gone from the controller's view, like a pod removed from the API server."""
    return row.state is not PodState.DELETED
