"""What trainguard tells Prometheus, computed from jobs' stored status, for every backend alike.

Nothing here is counted as it happens: every job metric is derived from the job's status (phase, pods,
history, hang restart counts) each time it is read, so a controller that restarts neither resets nor doubles a counter, and the
counters agree with ``status.history`` exactly. Only the controller's own figures (reconcile latency, queue
depth, errors) are kept in the process, in ``ControllerStats``; like any process metric they start again with it.

This module knows no metrics library: a backend turns ``Family`` values into its exporter's types where it
serves them (the local control plane: ``trainguard.backends.local.metrics``).

Limits: a job's history keeps its latest ``MAX_HISTORY`` entries, so a job with more faults and scale steps
than that has its oldest ones drop out of the counters. A deleted job's series disappear with it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from trainguard.api import RestartScope
from trainguard.controller.phases import JobPhase, PodPhase
from trainguard.controller.status import HistoryEntry, JobStatus
from trainguard.policy.types import FaultKind


class MetricType(str, Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its full exposed name (counters end in ``_total``), help, type, label names, buckets."""

    name: str
    help: str
    type: MetricType
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


@dataclass(frozen=True)
class Sample:
    labels: tuple[str, ...]
    value: float


@dataclass(frozen=True)
class HistogramSample:
    """``counts[i]`` observations were <= ``buckets[i]`` (cumulative); ``count`` is the +Inf bucket."""

    labels: tuple[str, ...]
    counts: tuple[int, ...]
    count: int
    sum: float


@dataclass(frozen=True)
class Family:
    spec: MetricSpec
    samples: tuple[Sample, ...] = ()
    histograms: tuple[HistogramSample, ...] = ()


@dataclass(frozen=True)
class JobSnapshot:
    """A job as a backend stores it: enough to label its metrics."""

    namespace: str
    name: str
    roles: tuple[str, ...]
    status: JobStatus


# ---- the metrics ---------------------------------------------------------------------------------------

_JOB = ("namespace", "trainingjob")
#: Fault to running again: from a quick restart in place to a long wait for a node.
RECOVERY_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
#: One reconcile pass of one job.
RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

JOBS = MetricSpec("trainguard_jobs", "Jobs by phase.", MetricType.GAUGE, ("phase",))
JOB_PHASE = MetricSpec(
    "trainguard_job_status_phase",
    "1 for the job's current phase, 0 for the others.",
    MetricType.GAUGE,
    (*_JOB, "phase"),
)
PODS = MetricSpec(
    "trainguard_pods",
    "Pod slots by role and phase (Waiting, Pending, Creating, Running, Succeeded, Failed, Shrunk, Removed).",
    MetricType.GAUGE,
    (*_JOB, "role", "phase"),
)
FAULTS = MetricSpec(
    "trainguard_faults_total",
    "Faults decided, by fault kind and the role of the faulted pod (history entries of kind fault).",
    MetricType.COUNTER,
    (*_JOB, "role", "kind"),
)
RESTARTS = MetricSpec(
    "trainguard_restarts_total",
    "Restart decisions, by scope and whether they counted toward limits: action restart relaunches the "
    "pods of the scope. One per decision. Hang restarts in place are not restarts "
    "(trainguard_hang_restarts_total).",
    MetricType.COUNTER,
    (*_JOB, "role", "action", "scope", "counted"),
)
HANGS = MetricSpec(
    "trainguard_hang_detections_total",
    "Hangs detected (faults of kind Hang), by role.",
    MetricType.COUNTER,
    (*_JOB, "role"),
)
HANG_RESTARTS = MetricSpec(
    "trainguard_hang_restarts_total",
    "Hang restarts in place (a hung command stopped and run again in its pod, nothing rescheduled), by role: "
    "the job's status.hangRestartCounts. Not among trainguard_restarts_total.",
    MetricType.COUNTER,
    (*_JOB, "role"),
)
SCALE_EVENTS = MetricSpec(
    "trainguard_scale_events_total",
    "Scaling steps by role and operation (scaleout, scalein, rejected) and cause (request: scale or apply; "
    "shrink: an elastic role went on without a failed pod; grow: capacity returned; timeout: a scale-out rolled "
    "back, or failed, past the job's scaling timeout).",
    MetricType.COUNTER,
    (*_JOB, "role", "operation", "cause"),
)
LIVE_REFORMATIONS = MetricSpec(
    "trainguard_live_reformations_total",
    "Live re-formations of the job (history entries of kind reformed): its workers (trainguard.Live) formed a "
    "new round in their own processes after a fault or a resize. Not restarts.",
    MetricType.COUNTER,
    _JOB,
)
ISOLATIONS = MetricSpec(
    "trainguard_nodes_isolated_total",
    "Nodes isolated because the fault tolerance check of one of the job's pods found faulty hardware "
    "(outcome isolate), or that the bound kept from being isolated (outcome refuse).",
    MetricType.COUNTER,
    (*_JOB, "outcome"),
)
RECOVERY = MetricSpec(
    "trainguard_fault_recovery_seconds",
    "From a fault to the pods it restarted running again, by role and fault kind.",
    MetricType.HISTOGRAM,
    (*_JOB, "role", "kind"),
    RECOVERY_BUCKETS,
)
TIME_LOST = MetricSpec(
    "trainguard_job_time_lost_seconds_total",
    "Recovery time of the job's recovered faults, summed per fault kind (overlapping recoveries add up).",
    MetricType.COUNTER,
    (*_JOB, "cause"),
)
RECOVERING = MetricSpec(
    "trainguard_job_faults_recovering",
    "Faults of a live job whose restarted pods are not running again yet.",
    MetricType.GAUGE,
    _JOB,
)
RECONCILE = MetricSpec(
    "trainguard_controller_reconcile_duration_seconds",
    "Time one reconcile pass of one job took (observe, decide, act, write status).",
    MetricType.HISTOGRAM,
    (),
    RECONCILE_BUCKETS,
)
QUEUE_DEPTH = MetricSpec(
    "trainguard_controller_queue_depth",
    "Jobs waiting for a reconcile pass when the latest pass began.",
    MetricType.GAUGE,
)
RECONCILE_ERRORS = MetricSpec(
    "trainguard_controller_reconcile_errors_total",
    "Reconcile passes that failed with an error (see the controller's log).",
    MetricType.COUNTER,
)

JOB_METRICS = (
    JOBS,
    JOB_PHASE,
    PODS,
    FAULTS,
    RESTARTS,
    HANGS,
    HANG_RESTARTS,
    SCALE_EVENTS,
    LIVE_REFORMATIONS,
    ISOLATIONS,
    RECOVERY,
    TIME_LOST,
    RECOVERING,
)
CONTROLLER_METRICS = (RECONCILE, QUEUE_DEPTH, RECONCILE_ERRORS)

#: Faults of a pod (a Deadline is the job's): the kinds every role's series start with, at 0.
POD_FAULTS = tuple(kind.value for kind in FaultKind if kind is not FaultKind.DEADLINE)
#: (action, scope, counted) of the restarts the policy can decide (a restart in place is none: it is a hang
#: restart, counted from the status by HANG_RESTARTS).
_RESTARTS = tuple(
    ("restart", scope.value, counted) for scope in RestartScope for counted in ("true", "false")
)
#: (operation, cause) of the scaling steps the controller records.
_SCALINGS = (
    ("scaleout", "request"),
    ("scalein", "request"),
    ("rejected", "request"),
    ("scalein", "shrink"),
    ("scaleout", "grow"),
)


def job_families(jobs: Iterable[JobSnapshot]) -> list[Family]:
    """Every job metric of ``jobs``, in the order of ``JOB_METRICS``."""
    snapshots = list(jobs)
    samples: dict[MetricSpec, list[Sample]] = {spec: [] for spec in JOB_METRICS}
    recoveries: dict[tuple[str, ...], list[float]] = {}
    phases = Counter(job.status.phase for job in snapshots)
    samples[JOBS] = [Sample((phase.value,), phases[phase]) for phase in JobPhase]
    for job in snapshots:
        _add_job(job, samples, recoveries)
    families = [Family(spec, tuple(samples[spec])) for spec in JOB_METRICS if spec is not RECOVERY]
    histograms = tuple(histogram(labels, values, RECOVERY_BUCKETS) for labels, values in recoveries.items())
    families.insert(JOB_METRICS.index(RECOVERY), Family(RECOVERY, histograms=histograms))
    return families


def _add_job(
    job: JobSnapshot, samples: dict[MetricSpec, list[Sample]], recoveries: dict[tuple[str, ...], list[float]]
) -> None:
    key = (job.namespace, job.name)
    status = job.status
    samples[JOB_PHASE] += [Sample((*key, p.value), float(p is status.phase)) for p in JobPhase]
    pods = Counter((pod.role, pod.phase) for pod in status.pods)
    for role in job.roles:
        samples[PODS] += [Sample((*key, role, p.value), pods[(role, p)]) for p in PodPhase]

    # Every series a job can have exists from its first scrape, at 0: Prometheus' increase() and rate()
    # cannot see the first event of a series that appears with it.
    tallies: dict[MetricSpec, Counter[tuple[str, ...]]] = {
        FAULTS: Counter({(role, kind): 0 for role in job.roles for kind in POD_FAULTS}),
        RESTARTS: Counter({(role, *restart): 0 for role in job.roles for restart in _RESTARTS}),
        HANGS: Counter({(role,): 0 for role in job.roles}),
        SCALE_EVENTS: Counter({(role, *scaling): 0 for role in job.roles for scaling in _SCALINGS}),
        LIVE_REFORMATIONS: Counter({(): 0}),
        ISOLATIONS: Counter({("isolate",): 0, ("refuse",): 0}),
    }
    for role in job.roles:
        for kind in POD_FAULTS:
            recoveries.setdefault((*key, role, kind), [])
    lost: dict[tuple[str, ...], float] = dict.fromkeys(((kind,) for kind in POD_FAULTS), 0.0)
    for entry in status.history:
        role = entry_role(entry, job)
        if entry.kind == "fault":
            kind = entry.fault.value if entry.fault is not None else "Unknown"
            tallies[FAULTS][(role, kind)] += 1
            if kind == "Hang":
                tallies[HANGS][(role,)] += 1
            if entry.action == "restart":
                counted = "true" if entry.counted else "false"
                tallies[RESTARTS][(role, entry.action.value, entry.scope or "Pod", counted)] += 1
            elif entry.action == "shrink":
                tallies[SCALE_EVENTS][(role, "scalein", "shrink")] += 1
            if entry.recovery_seconds is not None:
                recoveries.setdefault((*key, role, kind), []).append(entry.recovery_seconds)
                lost[(kind,)] = lost.get((kind,), 0.0) + entry.recovery_seconds
        elif entry.kind == "scale":
            tallies[SCALE_EVENTS][(role, entry.action.value, "request")] += 1
        elif entry.kind == "grow":
            tallies[SCALE_EVENTS][(role, "scaleout", "grow")] += 1
        elif entry.kind == "scale-rejected":
            tallies[SCALE_EVENTS][(role, "rejected", "request")] += 1
        elif entry.kind == "scale-timeout":
            tallies[SCALE_EVENTS][(role, entry.action.value, "timeout")] += 1
        elif entry.kind == "reformed":
            tallies[LIVE_REFORMATIONS][()] += 1
        elif entry.kind == "isolate":
            tallies[ISOLATIONS][(entry.action.value,)] += 1
    for spec, tally in tallies.items():
        samples[spec] += [Sample((*key, *labels), count) for labels, count in sorted(tally.items())]
    hang_restarts = status.hang_restart_counts
    samples[HANG_RESTARTS] += [Sample((*key, role), hang_restarts.get(role, 0)) for role in job.roles]
    samples[TIME_LOST] += [Sample((*key, *labels), seconds) for labels, seconds in sorted(lost.items())]
    # The controller's own list of what the pods wait to recover from (a fault whose pod later failed for
    # good or was scaled in leaves it without ever being recovered from).
    recovering = {seq for pod in status.pods for seq in pod.open_faults}
    samples[RECOVERING].append(Sample(key, len(recovering) if not status.phase.is_terminal else 0))


def entry_role(entry: HistoryEntry, job: JobSnapshot) -> str:
    """The role a history entry is about ("" when none); entries of older versions, without a role, by their
    pod's."""
    if entry.role is not None:
        return entry.role
    if entry.pod is not None:
        for pod in job.status.pods:
            if pod.name == entry.pod:
                return pod.role
        for role in job.roles:  # a pod the status no longer lists: its name is <job>-<role>-<index>
            if entry.pod.startswith(f"{job.name}-{role.lower()}-"):
                return role
    return ""


def histogram(labels: tuple[str, ...], values: Sequence[float], buckets: Sequence[float]) -> HistogramSample:
    counts = tuple(sum(1 for value in values if value <= bound) for bound in buckets)
    return HistogramSample(labels, counts, len(values), float(sum(values)))


@dataclass
class ControllerStats:
    """The controller's own figures, kept in its process (thread-safe: read while the loop writes)."""

    durations: list[int] = field(default_factory=lambda: [0] * len(RECONCILE_BUCKETS))
    count: int = 0
    total_seconds: float = 0.0
    queue_depth: int = 0
    errors: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def observe(self, seconds: float) -> None:
        with self._lock:
            for position, bound in enumerate(RECONCILE_BUCKETS):
                if seconds <= bound:
                    self.durations[position] += 1
            self.count += 1
            self.total_seconds += seconds

    def set_queue_depth(self, jobs: int) -> None:
        with self._lock:
            self.queue_depth = jobs

    def failed(self) -> None:
        with self._lock:
            self.errors += 1

    def families(self) -> list[Family]:
        with self._lock:
            latency = HistogramSample((), tuple(self.durations), self.count, self.total_seconds)
            return [
                Family(RECONCILE, histograms=(latency,)),
                Family(QUEUE_DEPTH, (Sample((), self.queue_depth),)),
                Family(RECONCILE_ERRORS, (Sample((), self.errors),)),
            ]
