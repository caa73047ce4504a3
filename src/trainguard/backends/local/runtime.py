"""Pods of every job as process groups on this machine, tracked in the store.

Every change of a pod goes through its row, written with compare-and-swap, and the row is written *before*
the process is touched: a launch is recorded as ``Launching`` before the process starts, so a control plane
killed in between finds the row on its next start and either adopts the process (recognised by the
``TRAINGUARD_POD_ID`` in its environment) or starts it then. A pod name never has two processes: a launch
first kills whatever an older incarnation left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import psutil

from trainguard.api import TrainingJob
from trainguard.backends.local import nudge, placement, processes
from trainguard.backends.local.agentcmd import agent_argv
from trainguard.backends.local.home import Home
from trainguard.backends.local.hosts.setup import pod_environment as horovod_environment
from trainguard.backends.local.podenv import argv_and_cwd, pod_environment
from trainguard.backends.local.records import EventRecord, JobRecord, NodeRecord, PodRecord, PodState
from trainguard.backends.local.reports import Report, ReportReader
from trainguard.backends.local.statefile import Conflict
from trainguard.backends.local.store import Store
from trainguard.controller.agent_options import grace_seconds
from trainguard.controller.launchspec import LaunchSpec
from trainguard.pod import contract

#: Marks a pod's agent in its environment: "<job uid>/<pod>/<launch>".
POD_ID_ENV = "TRAINGUARD_POD_ID"
#: Exit code of a pod whose process could not be started (bad workingDir, ...), as Kubernetes reports.
START_ERROR_EXIT = 128
#: Past the grace period the agent escalates to SIGKILL itself; we do too, a little later.
_STOP_MARGIN_SECONDS = 2.0
#: How long a SIGKILLed pod may take to disappear before we report it as still there.
_KILL_WAIT_SECONDS = 5.0


@dataclass
class FreeSlots:
    """The nodes as one look found them, and their free slots (node -> slots), counted down as pods go."""

    nodes: list[NodeRecord]
    slots: dict[str, int]


class Runtime:
    def __init__(
        self, home: Home, store: Store, clock: Callable[[], float], base_env: dict[str, str]
    ) -> None:
        self.home = home
        self.store = store
        self.clock = clock
        self.base_env = base_env
        self.reports = ReportReader()
        #: The agents this process started, so that their exits are reaped (pid -> process).
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        #: The nodes' free slots while a batch of placements runs (``placing``).
        self._free: FreeSlots | None = None
        #: Each job's rows as the latest ``refresh`` left them, until ``rows`` takes them (one read of a big
        #: job's rows per reconcile, not two).
        self._refreshed: dict[str, list[PodRecord]] = {}

    # ---- launching ---------------------------------------------------------------------------------

    def launch(
        self,
        record: JobRecord,
        job: TrainingJob,
        pod: str,
        role: str,
        index: int,
        generation: int,
        restarts: int,
        spec: LaunchSpec,
        avoid: Iterable[str] = (),
    ) -> None:
        """Start incarnation ``generation`` of ``pod`` (or queue it until a node has room). Idempotent.
        Raises ``ValueError`` when a pod of that name is another job's (it is left alone)."""
        row = self.store.get_pod(pod)
        if row is not None and row.job != record.name:
            # Job ``train`` with a role ``big-worker`` and job ``train-big`` with a role ``worker`` both name a
            # pod ``train-big-worker-0``: a pod name is one job's at a time.
            raise ValueError(f"pod {pod} exists and is job {row.job}'s; a pod name is one job's")
        if row is not None and row.launch >= generation:
            return  # this launch (or a later one) happened already
        if row is not None and row.alive:
            self.kill_now(row)  # the previous incarnation must be gone first: never two of one pod
            self._released(row)
        fresh = PodRecord(
            name=pod,
            job=record.name,
            role=role,
            index=index,
            node="",
            state=PodState.PENDING,
            launch=generation,
            restarts=restarts,
            avoid=tuple(avoid),
            launch_spec_json=json.dumps(spec.to_dict()),
        )
        row = (
            self.store.insert_pod(fresh)
            if row is None
            else self.store.update_pod(replace(fresh, version=row.version))
        )
        self._place(record, job, row)

    def place_pending(self, record: JobRecord, job: TrainingJob) -> None:
        """Start the job's pods that were waiting for a free slot, if one is free now."""
        with self.placing() as free:
            if placement.room(free.nodes, free.slots) <= 0:
                return  # the usual case of a job whose pods wait: nothing to read, nothing to try
            for row in self.store.list_pods(record.name, state=PodState.PENDING):
                if placement.room(free.nodes, free.slots) <= 0:
                    return
                self._place(record, job, row)

    @contextlib.contextmanager
    def placing(self) -> Iterator[FreeSlots]:
        """Place pods from one look at the nodes and their free slots, counted down as pods are placed,
        instead of one look at every pod per placement: a batch of launches costs what its pods cost, not
        that times all the pods there are. Slots freed meanwhile are seen by the next batch."""
        if self._free is not None:
            yield self._free  # nested: the outer batch's look still holds
            return
        nodes = self.store.list_nodes()
        self._free = FreeSlots(nodes, placement.free_of(nodes, self.store.slots_in_use()))
        try:
            yield self._free
        finally:
            self._free = None

    def _released(self, row: PodRecord) -> None:
        """``row``'s pod no longer holds its slot: a batch of placements under way may use it."""
        if self._free is not None and row.holds_slot and row.node in self._free.slots:
            self._free.slots[row.node] += 1

    def _place(self, record: JobRecord, job: TrainingJob, row: PodRecord) -> None:
        with self.placing() as free:
            node = placement.pick(free.nodes, free.slots, row.avoid)
            if node is None:
                return
            free.slots[node] -= 1
        row = self.store.update_pod(replace(row, node=node, state=PodState.LAUNCHING))
        self._event(row, "Normal", "Scheduled", f"assigned {row.name} to {node}")
        self._spawn(record, job, row)

    def _spawn(self, record: JobRecord, job: TrainingJob, row: PodRecord) -> PodRecord:
        report = self.home.report_file(record.name, row.name, row.launch)
        report.unlink(missing_ok=True)  # a relaunch after a crash must not read a half-run's lines
        self.reports.forget(report)
        control = self.home.control_file(record.name, row.name)
        control.unlink(missing_ok=True)  # a request meant for an earlier launch
        extra = {
            POD_ID_ENV: pod_marker(record.uid, row),
            contract.ENV_REPORT_FILE: str(report),
            contract.ENV_NODE_NAME: row.node,
            contract.ENV_FAULT_INJECT: str(self.home.injected_faults),
            contract.ENV_SNAPSHOT_DIR: str(self.home.snapshots_dir(record.uid, row.node)),
        }
        if job.spec.framework_type.value == "horovod":  # our ssh, and where trainers' host processes are
            extra.update(
                horovod_environment(
                    self.home.job_dir(record.name),
                    self.home.discovery_script(record.name),
                    row.name,
                    self.base_env,
                )
            )
        log = self.home.pod_log(record.name, row.name)
        cwd: Path | str = record.workdir
        try:
            # A launch queued by a trainguard older than launch specs has none: it fails to start, and the
            # controller relaunches it (with a spec) by the job's policy.
            spec = LaunchSpec.from_dict(row.launch_spec)
            env = pod_environment(job, row.role, spec, self.base_env, extra)
            argv, cwd = argv_and_cwd(job, row.role, spec, env, record.workdir)
            nudge_file = self.home.nudge_file(record.name, row.name, row.launch)
            nudge.create(nudge_file)  # empty before the agent starts: the first nudge it sees is a change
            command = agent_argv(job, row.role, report, argv, control, nudge_file)
            started = processes.start(command, env, cwd, log)
        except (OSError, KeyError) as error:
            why = error.strerror or error if isinstance(error, OSError) else f"no launch spec ({error})"
            message = f"cannot start {row.name}: {why} ({cwd})"
            self._event(row, "Warning", "FailedStart", message)
            return self.store.update_pod(
                replace(
                    row,
                    state=PodState.EXITED,
                    exit_code=START_ERROR_EXIT,
                    reason="StartError",
                    finished_at=self.clock(),
                )
            )
        self._children[started.pid] = started.process
        self._event(row, "Normal", "Started", f"started {row.name} on {row.node} (pid {started.pid})")
        return self.store.update_pod(
            replace(
                row,
                state=PodState.RUNNING,
                pid=started.pid,
                create_time=started.create_time,
                started_at=self.clock(),
            )
        )

    # ---- watching ----------------------------------------------------------------------------------

    def refresh(self, job: str, *, keep: bool = False) -> list[PodRecord]:
        """Bring the job's pod rows up to date with their processes (the kubelet's part: an agent that ended
        is recorded with its exit, one that vanished as gone, an eviction's grace enforced); returns them. It
        decides nothing: a pod the controller removes that outlives its grace period is the controller's to
        remove by force (``ObservedPod.overdue``)."""
        self._reap()
        rows = []
        for row in self.store.list_pods(job):
            with contextlib.suppress(Conflict):  # changed under us: the next refresh sees it
                row = self._refresh_one(row)
            rows.append(row)
        if keep:  # for the controller's look that follows (``rows``)
            self._refreshed[job] = rows
        return rows

    def rows(self, job: str) -> list[PodRecord]:
        """The job's pod rows: as the refresh just before left them (taken once), else read now."""
        rows = self._refreshed.pop(job, None)
        return rows if rows is not None else self.store.list_pods(job)

    def _refresh_one(self, row: PodRecord) -> PodRecord:
        if not row.alive or row.pid is None:
            return row
        leader = processes.find(row.pid, row.create_time)
        child = self._children.get(row.pid)
        if leader is not None and (child is None or child.poll() is None):
            deadline = row.stop_deadline if row.state is not PodState.TERMINATING else None
            if deadline is not None and self.clock() >= deadline:
                # An eviction's grace is over (chaos plays the kubelet's eviction, and the kubelet's SIGKILL
                # after the grace period is this part's too). A removal the controller asked for and that
                # outlives its grace is the controller's to finish, by force (``ObservedPod.overdue``).
                processes.kill_tree(leader)
                self._kill_command(row)
            return row
        return self.store.update_pod(self._ended(row, child.returncode if child is not None else None))

    def _ended(self, row: PodRecord, returncode: int | None) -> PodRecord:
        """The row of a pod whose agent is gone, with the exit its report (or its wait status) gives."""
        self._children.pop(row.pid or 0, None)
        now = self.clock()
        if row.state is PodState.TERMINATING:
            return replace(row, state=PodState.DELETED, finished_at=now, stop_deadline=None)
        report = self.report(row)
        code, sig, reason = _exit_of(report, returncode)
        if row.injected.get("launch") == row.launch:  # chaos decided why this launch ends (evicted)
            reason = row.injected.get("reason", reason)
        if code is None:  # no report and not our child: it vanished, as a force-deleted pod does
            return replace(
                row, state=PodState.DELETED, reason="Vanished", finished_at=now, stop_deadline=None
            )
        return replace(
            row,
            state=PodState.EXITED,
            exit_code=code,
            signal=sig,
            reason=reason,
            finished_at=now,
            stop_deadline=None,
        )

    def report(self, row: PodRecord) -> Report:
        return self.reports.read(self.home.report_file(row.job, row.name, row.launch))

    def _reap(self) -> None:
        """Collect exited agents we started (no zombies); their statuses stay on the Popen objects."""
        for process in list(self._children.values()):
            process.poll()

    # ---- stopping ----------------------------------------------------------------------------------

    def terminate(self, job: TrainingJob, pod: str, generation: int, force: bool) -> None:
        """Stop incarnation ``generation`` of ``pod``: SIGTERM, then SIGKILL after the grace period."""
        row = self._own_row(job.name, pod)
        if row is None or row.launch != generation or row.state is PodState.DELETED:
            return
        if not row.alive or row.pid is None:
            self.store.update_pod(replace(row, state=PodState.DELETED, deleted_by_us=True))
            return
        if force:
            self.kill_now(row)
            self.store.update_pod(replace(self._fresh(row), state=PodState.DELETED, deleted_by_us=True))
            self._released(row)
            return
        if row.state is PodState.TERMINATING:
            return
        leader = processes.find(row.pid, row.create_time)
        if leader is not None:
            with contextlib.suppress(psutil.Error):
                leader.send_signal(signal.SIGTERM)  # the agent forwards it and escalates itself too
            processes.signal_tree(leader, signal.SIGCONT, include_leader=False)  # a stopped tree must hear it
        deadline = self.clock() + grace_seconds(job, row.role) + _STOP_MARGIN_SECONDS
        self.store.update_pod(
            replace(row, state=PodState.TERMINATING, deleted_by_us=True, stop_deadline=deadline)
        )
        self._event(row, "Normal", "Killing", f"stopping {row.name}")

    def acknowledge_in_place(self, job: str, pod: str, generation: int, attempt: int) -> None:
        """The controller decided restart in place number ``attempt``; the agent does (or did) it itself."""
        row = self._own_row(job, pod)
        if row is not None and row.launch == generation and row.in_place_acked < attempt:
            self.store.update_pod(replace(row, in_place_acked=attempt))

    def _own_row(self, job: str, pod: str) -> PodRecord | None:
        """The row of ``pod`` if it is ``job``'s: a pod of that name may be another job's, which this job's
        actions never touch (rows belong to a job by its row in ``jobs``, never by a name prefix)."""
        row = self.store.get_pod(pod)
        return row if row is not None and row.job == job else None

    def kill_now(self, row: PodRecord) -> None:
        """SIGKILL the pod's tree and wait (bounded) until its agent is gone; then SIGKILL any process left
        that carries the pod's marker in its environment."""
        leader = processes.find(row.pid, row.create_time)
        if leader is not None:
            processes.kill_tree(leader)
        self._kill_command(row)
        deadline = time.monotonic() + _KILL_WAIT_SECONDS
        while leader is not None and time.monotonic() < deadline:
            self._reap()
            if processes.find(row.pid, row.create_time) is None:
                break
            time.sleep(0.02)
        child = self._children.pop(row.pid or 0, None)
        if child is not None and child.poll() is None:
            # Not found any more (a zombie not yet reaped: find() skips those) or still dying after the wait:
            # our own child, so its pid is still ours; killed and reaped here rather than left to the garbage.
            child.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(_KILL_WAIT_SECONDS)
        record = self.store.get_job(row.job, include_deleted=True)
        if record is not None:  # whatever escaped the tree as it was killed (adopted by init meanwhile)
            processes.kill_marked(POD_ID_ENV, pod_marker(record.uid, row))

    def _kill_command(self, row: PodRecord) -> None:
        """The command's own process group, in case the agent died before it and left it behind."""
        child = self.report(row).child_pid
        if child:
            for signum in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child, signum)

    def _fresh(self, row: PodRecord) -> PodRecord:
        return self.store.get_pod(row.name) or row

    # ---- recovery after a restart of the control plane ---------------------------------------------

    def recover(self, jobs: dict[str, tuple[JobRecord, TrainingJob]]) -> None:
        """Finish launches that a killed control plane left half-done: adopt their process, or start it."""
        for row in self.store.list_pods():
            if row.state is not PodState.LAUNCHING or row.pid is not None or row.job not in jobs:
                continue
            record, job = jobs[row.job]
            found = find_by_marker(pod_marker(record.uid, row))
            if found is not None:
                self.store.update_pod(
                    replace(row, state=PodState.RUNNING, pid=found.pid, create_time=found.create_time())
                )
            elif self.report(row).started:  # it ran and ended meanwhile: its report says how
                self.store.update_pod(self._ended(row, None))
            else:
                self._spawn(record, job, row)

    # ---- nodes -------------------------------------------------------------------------------------

    def ensure_nodes(self, count: int, slots: int) -> None:
        existing = {node.name for node in self.store.list_nodes()}
        for index in range(count):
            name = f"node-{index}"
            if name not in existing:
                self.store.add_node(NodeRecord(name, slots))

    # ---- helpers -----------------------------------------------------------------------------------

    def _event(self, row: PodRecord, type_: str, reason: str, message: str) -> None:
        self.store.append_event(EventRecord(row.job, self.clock(), type_, reason, row.name, message))


def _exit_of(report: Report, returncode: int | None) -> tuple[int | None, int | None, str | None]:
    """(exit code, signal, reason): the agent's report when it wrote one, else the wait status."""
    if report.exited:
        return report.exit_code, report.signal, report.reason
    if returncode is None:
        return None, None, None
    if returncode < 0:  # the agent itself was killed by a signal
        return 128 - returncode, -returncode, None
    return returncode, None, None


def pod_marker(job_uid: str, row: PodRecord) -> str:
    """The value of ``TRAINGUARD_POD_ID`` that every process of one launch of a pod inherits."""
    return f"{job_uid}/{row.name}/{row.launch}"


def find_by_marker(marker: str) -> psutil.Process | None:
    """The agent whose environment carries ``TRAINGUARD_POD_ID=<marker>`` (a launch we lost track of); not
    its own child between fork and exec, which looks the same (``processes.leaders``)."""
    matches = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            cmdline = process.info.get("cmdline") or []
            if "trainguard.agent" not in cmdline or process.status() == psutil.STATUS_ZOMBIE:
                continue
            if process.environ().get(POD_ID_ENV) == marker:
                matches.append(process)
        except psutil.Error:
            continue
    return next(iter(processes.leaders(matches)), None)
