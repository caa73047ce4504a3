"""The discrete-event loop: faults happen to nodes and pods, the real controller (``controller.step``, the
same call the local runtime makes) decides what to do, the simulated cluster does it, and the ledger
records where the time went.

When the controller runs:
- at once when a fault becomes visible (a process exit, a hang report, a node seen NotReady, an eviction),
  and when the controller asked to be woken (``wake_at``: a backoff ends, a start deadline, the job's limit);
- after other changes it has not seen yet (pods placed, started, progress), batched over ``batch`` seconds
  as a controller's watch would batch them;
- when a repaired node gives a shrunk role room to grow back;
- as every driver does after a conflicting status write (at once, from the stored status) and after a
  reconcile that raised (``trainguard.controller.retries``: after the job's backoff, one log line a step).

The job trains while every pod of its current membership runs healthily. A fault stops it at once (the
ranks of a synchronous job wait for the lost one); the job resumes ``restart_cost`` seconds after every pod of its
membership runs again (rendezvous, loading the checkpoint). When the controller grows a shrunk role back, the job
saves a checkpoint and restarts with the larger world.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from trainguard.api import TrainingJob
from trainguard.backends.sim.accounting import Cause, Segment
from trainguard.backends.sim.cluster import SimCluster
from trainguard.backends.sim.failures import FailureKind
from trainguard.backends.sim.pods import SimPod
from trainguard.backends.sim.timing import ABORT_EXIT_CODE, Timing
from trainguard.controller import (
    HistoryEntry,
    JobPhase,
    JobStatus,
    ObservedPhase,
    PodStatus,
    ReconcileResult,
    RestartInPlace,
    SettledSlots,
    TerminatePod,
    step,
)
from trainguard.controller.phases import ALIVE_PHASES, PodPhase
from trainguard.controller.retries import Retries
from trainguard.pod.checks import EXIT_CHECK_FAILED, REASON_HARDWARE, CheckResult

log = logging.getLogger(__name__)


@dataclass
class FaultRecord:
    at: float
    kind: FailureKind
    node: str
    #: The job's pod it hit, if any.
    pod: str | None
    detected_at: float | None = None


@dataclass
class Engine:
    job: TrainingJob
    cluster: SimCluster
    timing: Timing
    worker_role: str
    status: JobStatus = field(default_factory=JobStatus)
    #: Training segments so far, and time lost while not training, by cause.
    segments: list[Segment] = field(default_factory=list)
    down: dict[Cause, float] = field(default_factory=lambda: dict.fromkeys(Cause, 0.0))
    #: (start, end, cause) of every stretch without training, merged when the cause stays the same.
    down_spans: list[tuple[float, float, Cause]] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    #: Every history entry the controller wrote (its status keeps only the latest).
    history: list[HistoryEntry] = field(default_factory=list)
    reconciles: int = 0
    #: When the job reached a terminal phase.
    ended_at: float | None = None
    _due_token: int = 0
    _due_at: float | None = None
    _last_reconcile: float = -math.inf
    _seen_version: int = -1
    #: The slots of the latest status, and what the job needs to know of them.
    _pods: tuple[PodStatus, ...] | None = None
    _alive: frozenset[str] = frozenset()
    _alive_workers: int = 0
    _shrunk: bool = False
    _history_seq: int = 0
    _training_since: float | None = None
    _members: frozenset[str] = frozenset()
    _fraction: float = 1.0
    _resume_token: int = 0
    _resume_at: float | None = None
    _saving_until: float = 0.0
    #: Pods hit by a fault the controller has not dealt with yet: name -> generation.
    _broken: dict[str, int] = field(default_factory=dict)
    #: A fault was seen since the job last trained (the time down is recovery, not detection).
    _recovering: bool = False
    _trained: bool = False
    _needs_progress: set[str] = field(default_factory=set)
    #: Slots found settled, skipped by the next reconciles (the controller's memory, owned here).
    _settled: SettledSlots = field(default_factory=SettledSlots)
    #: The job's failed reconciles in a row.
    _retries: Retries[str] = field(default_factory=Retries)
    _accounted_to: float = 0.0

    @property
    def now(self) -> float:
        return self.cluster.now

    @property
    def asked_workers(self) -> int:
        return self.job.spec.replica_specs[self.worker_role].replicas

    @property
    def training(self) -> bool:
        return self._training_since is not None

    # ---- running ----------------------------------------------------------------------------------

    def start(self) -> None:
        self._accounted_to = self.now
        self._request(self.now)

    def run_until(self, until: float) -> None:
        clock = self.cluster.clock
        while (when := clock.next_time()) is not None and when <= until:
            self._account(when)
            clock.pop()()
            self._after_event()
        self._account(until)
        clock.advance_to(until)

    def finish(self) -> None:
        """End the run now: a job still training keeps the work since its last checkpoint."""
        self._account(self.now)
        if self.training:
            self._stop(graceful=True)

    def _account(self, until: float) -> None:
        elapsed = until - self._accounted_to
        if elapsed > 0 and not self.training and not self._finished():
            cause = self._down_cause()
            self.down[cause] += elapsed
            start = self._accounted_to
            last = self.down_spans[-1] if self.down_spans else None
            if last is not None and last[2] is cause and last[1] == start:
                self.down_spans[-1] = (last[0], until, cause)
            else:
                self.down_spans.append((start, until, cause))
        self._accounted_to = max(self._accounted_to, until)

    def _finished(self) -> bool:
        return self.status.phase is JobPhase.SUCCEEDED

    def _down_cause(self) -> Cause:
        if self.status.phase.is_terminal:
            return Cause.JOB_FAILED
        if self._accounted_to < self._saving_until:
            return Cause.CHECKPOINTING
        if any(name in self._alive for name in self.cluster.unplaced()):
            return Cause.WAITING_FOR_CAPACITY
        if self._broken and not self._recovering:
            return Cause.DETECTION
        if not self._trained and not self._recovering:
            return Cause.STARTUP
        return Cause.RESTART

    # ---- the controller ---------------------------------------------------------------------------

    def _request(self, when: float) -> None:
        """Reconcile at ``when`` (or earlier, if already asked for)."""
        if self._due_at is not None and self._due_at <= when:
            return
        self._due_token += 1
        token, self._due_at = self._due_token, when
        self.cluster.clock.at(when, lambda: self._due(token))

    def _due(self, token: int) -> None:
        if token == self._due_token:
            self._due_at = None
            self._reconcile()

    def _reconcile(self) -> None:
        version = self.cluster.version
        try:
            stepped = step(self.cluster, self.job, self.status, self.now, self._settled)
        except Exception as error:  # tried again after the job's backoff, as on every driver
            retry = self._retries.failed(self.job.name)
            retry.log(log, f"reconcile of job {self.job.name} at {self.now:.1f} s", error)
            # What it was shown counts as seen: only a later change comes sooner, as a watch event would.
            self._seen_version, self._last_reconcile = version, self.now
            self._request(self.now + retry.delay)
            return
        self._retries.succeeded(self.job.name)
        self.reconciles += 1
        self._seen_version = version
        self._last_reconcile = self.now
        if stepped.applied.conflict:  # the status was not stored: read it again (and decide again at once)
            self.status = self.cluster.stored or JobStatus()
        else:
            self._take_result(stepped)
        again = stepped.again_at(self.now)
        if again is not None:
            self._request(again)

    def _take_result(self, result: ReconcileResult) -> None:
        self.status = result.status
        for action in result.actions:
            if isinstance(action, RestartInPlace | TerminatePod):
                if self._broken.get(action.pod) == action.generation:
                    del self._broken[action.pod]
                if isinstance(action, RestartInPlace):
                    self._needs_progress.add(action.pod)
        self._take_status()

    def _take_status(self) -> None:
        if self.status.pods != self._pods:  # frozen slots: equal ones (most often the same) tell the same
            self._take_pods(self.status.pods)
        for entry in self.status.history:
            if entry.seq > self._history_seq:
                self.history.append(entry)
        if self.status.history:
            self._history_seq = max(self._history_seq, self.status.history[-1].seq)

    def _take_pods(self, pods: tuple[PodStatus, ...]) -> None:
        self._pods = pods
        alive = [p for p in pods if p.phase in ALIVE_PHASES]
        self._alive = frozenset(p.name for p in alive)
        self._alive_workers = sum(1 for p in alive if p.role == self.worker_role)
        self._shrunk = any(p.phase is PodPhase.SHRUNK for p in pods)

    def _after_event(self) -> None:
        if self.cluster.version != self._seen_version:
            self._request(max(self.now, self._last_reconcile + self.timing.batch))
        self._check()

    # ---- the job: training, stopping, resuming ----------------------------------------------------------

    def _all_fine(self, names: frozenset[str]) -> bool:
        """Every one of these pods runs, is not hung, and has no fault the controller has not dealt with."""
        if not self.cluster.all_running(names):
            return False
        pods = self.cluster.pods
        return not any(name in names and pods[name].generation == gen for name, gen in self._broken.items())

    def _check(self) -> None:
        if self.status.phase.is_terminal:
            if self.ended_at is None:
                self.ended_at = self.now
            if self.training:
                self._stop(graceful=self._finished())
            self._cancel_resume()
            return
        if self.training:
            if not self._all_fine(self._members):
                self._stop(graceful=False)
            elif self._alive != self._members and self._all_fine(self._alive):
                self._stop(graceful=True)  # grown back: save, then restart with the larger world
                self._saving_until = self.now + self.timing.checkpoint_cost
                self.cluster.clock.at(self._saving_until, lambda: None)
            else:
                return
        ready = bool(self._alive) and self._all_fine(self._alive)
        if ready and self._resume_at is None:
            self._resume_token += 1
            token = self._resume_token
            self._resume_at = max(self.now, self._saving_until) + self.timing.restart_cost
            self.cluster.clock.at(self._resume_at, lambda: self._resume(token))
        elif not ready:
            self._cancel_resume()

    def _cancel_resume(self) -> None:
        self._resume_token += 1
        self._resume_at = None

    def _resume(self, token: int) -> None:
        if token != self._resume_token:
            return
        self._resume_at = None
        self._training_since = self.now
        self._members = self._alive
        self._fraction = min(self._alive_workers / self.asked_workers, 1.0) if self.asked_workers else 1.0
        self._trained, self._recovering = True, False
        for name in sorted(self._needs_progress):
            if name in self.cluster.pods:
                self.cluster.report_progress(name)
        self._needs_progress.clear()

    def _stop(self, *, graceful: bool) -> None:
        if self._training_since is not None:
            self.segments.append(Segment(self._training_since, self.now, self._fraction, graceful))
        self._training_since = None

    # ---- what a user or an operator does (seen at once) ------------------------------------------------

    def exit_pod(self, name: str, code: int) -> None:
        """The pod's process ends with ``code`` (0: it succeeded)."""
        if code != 0:
            self._break(self.cluster.pods[name])
        self.cluster.exit(name, code)
        self._noticed(failure=code != 0)

    def evict_pod(self, name: str) -> None:
        self._break(self.cluster.pods[name])
        self.cluster.evict(name)
        self._noticed()

    def force_delete(self, name: str) -> None:
        self.cluster.force_delete(name)
        self._noticed()

    def node_down(self, node: str) -> None:
        pod = self.cluster.pod_on(node)
        if pod is not None:
            self._break(pod)
        self.cluster.node_down(node)
        self._noticed(failure=pod is not None)

    def node_up(self, node: str) -> None:
        self.cluster.node_up(node)
        self._noticed(failure=False)

    def scale(self, role: str, replicas: int) -> None:
        self.cluster.scale(role, replicas)
        self._noticed(failure=False)

    def _noticed(self, *, failure: bool = True) -> None:
        self._recovering = self._recovering or failure
        self._request(self.now)
        self._after_event()

    # ---- faults ---------------------------------------------------------------------------------------

    def fail(self, node: str, kind: FailureKind) -> None:
        """``kind`` happens to ``node`` (and to the job's pod on it, if any) now."""
        target = self.cluster.nodes[node]
        if not target.alive:
            return  # a node that is down cannot fail again
        pod = self.cluster.pod_on(node)
        if kind is FailureKind.NODE:
            lost = FaultRecord(self.now, kind, node, pod.name if pod else None)
            self.faults.append(lost)
            self.cluster.node_lost(node)
            if pod is not None:
                self._break(pod)
            self._later(self.timing.node_detect, lambda: self._seen_down(node, lost))
            self._later(self.timing.repair, lambda: self._repair(node))
            return
        if pod is None or pod.phase is not ObservedPhase.RUNNING or pod.name in self._broken:
            return  # no process to fail (or one already failing)
        record = FaultRecord(self.now, kind, node, pod.name)
        self.faults.append(record)
        generation = pod.generation
        if kind is FailureKind.EVICT:
            self._evict(pod, record)
            return
        self._break(pod)
        hang = self.job.spec.hang
        if kind is FailureKind.HANG and hang is not None and hang.enabled:
            self._later(hang.timeout_seconds, lambda: self._seen(pod.name, generation, record, "hang"))
        elif kind is FailureKind.HANG:
            delay = self.timing.collective_timeout + self.timing.crash_detect
            self._later(delay, lambda: self._seen(pod.name, generation, record, "abort"))
        else:
            self._later(self.timing.crash_detect, lambda: self._seen(pod.name, generation, record, "crash"))

    def check_fault(self, node: str, kind: FailureKind, found: CheckResult, delay: float) -> None:
        """The hardware of ``node`` fails the job's pod there now (stopping the job at once); the agent's check
        ``found`` it ``delay`` seconds later, and the pod ends with ``HardwareFault`` (docs/simulator.md)."""
        pod = self.cluster.pod_on(node)
        if pod is None or pod.phase is not ObservedPhase.RUNNING or pod.name in self._broken:
            return
        record = FaultRecord(self.now, kind, node, pod.name)
        self.faults.append(record)
        self._break(pod)
        self._later(delay, lambda: self._checked(pod, record, found))

    def _checked(self, pod: SimPod, record: FaultRecord, found: CheckResult) -> None:
        if self.cluster.pods.get(pod.name) is not pod or pod.phase is not ObservedPhase.RUNNING:
            return  # replaced or ended meanwhile
        self.cluster.exit(pod.name, EXIT_CHECK_FAILED, REASON_HARDWARE, check=found)
        self._detected(record)

    def _evict(self, pod: SimPod, record: FaultRecord) -> None:
        """SIGTERM, then the grace period: the job saves on the way out when its checkpoint fits in it."""
        saves = self.timing.checkpoint_cost <= self.timing.grace
        if saves and self.training and pod.name in self._members:
            self._stop(graceful=True)
            self._saving_until = self.now + self.timing.checkpoint_cost
        self._break(pod)
        node = pod.node
        if node is not None:
            self.cluster.cordon(node)
            self._later(self.timing.maintenance, lambda: self._uncordon(node))
        delay = self.timing.checkpoint_cost if saves else self.timing.grace
        self._later(delay, lambda: self._seen(pod.name, pod.generation, record, "evict"))

    def _uncordon(self, node: str) -> None:
        self.cluster.uncordon(node)
        if self._shrunk:
            self._request(self.now)

    def _break(self, pod: SimPod) -> None:
        self._broken[pod.name] = pod.generation

    def _later(self, delay: float, action: Callable[[], None]) -> None:
        self.cluster.clock.at(self.now + delay, action)

    def _seen(self, name: str, generation: int, record: FaultRecord, how: str) -> None:
        pod = self.cluster.pods.get(name)
        if pod is None or pod.generation != generation or pod.phase is not ObservedPhase.RUNNING:
            return  # replaced or ended meanwhile
        if how == "hang":
            self.cluster.hang(name)
        elif how == "evict":
            self.cluster.evict(name)
        else:
            self.cluster.exit(name, self.timing.crash_exit_code if how == "crash" else ABORT_EXIT_CODE)
        self._detected(record)

    def _seen_down(self, node: str, record: FaultRecord) -> None:
        if self.cluster.nodes[node].alive:
            return  # repaired before anyone noticed
        self.cluster.node_down(node)
        if record.pod is not None:
            self._detected(record)

    def _detected(self, record: FaultRecord) -> None:
        record.detected_at = self.now
        self._recovering = True
        self._request(self.now)

    def _repair(self, node: str) -> None:
        self.cluster.node_up(node)
        if self._shrunk:
            self._request(self.now)
