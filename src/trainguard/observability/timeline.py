"""A job's fault timeline, rebuilt from its status: per pod, when it started, ran, failed, hung or was
restarted, when a role scaled, and how long each fault took to recover from.

It reads only what every backend stores and shows (``status.transitions``, ``status.history``,
``status.pods``, as ``trainguard get -o json`` prints them, or the bare status), so the local runtime, the
operator and the simulator draw the same picture from the same data as ``describe``. Times are on the
controller's clock; ``Timeline.start`` is where the picture begins.

What the status does not record is inferred, and said so here: a pod counts as running from the first time
afterwards that the job was ``Running`` (all pods running) or its stored ``runningSince``, and a pod that
a restart of scope Replica or All took down runs again when that fault is recovered from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from trainguard.controller.phases import JobPhase
from trainguard.controller.status import HistoryEntry, PhaseTransition


class PodState(str, Enum):
    STARTING = "starting"  # launched (or waiting to be), not known to run yet
    RUNNING = "running"
    FAILED = "failed"  # exited, OOM-killed or did not start in time
    LOST = "lost"  # its node failed, it was deleted or evicted
    HUNG = "hung"
    RESTARTING = "restarting"  # taken down by a restart of its role or job for another pod's fault


#: Faults whose pod comes back on another node (docs/policy.md §3, Actions and scopes).
_MOVED = frozenset({"NodeNotReady", "PodEvicted", "StartTimeout", "HardwareFault", "PreCheckFailed"})
_LOST = frozenset({"NodeNotReady", "PodForceDeleted", "PodEvicted"})
_ENDING_ACTIONS = frozenset({"shrink", "none", "fail-role", "fail-job"})


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    state: str


@dataclass(frozen=True)
class Lane:
    pod: str
    role: str
    index: int
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class FaultMark:
    """One fault of ``status.history``, as it is annotated on its pod's lane."""

    seq: int
    at: float
    pod: str
    fault: str
    action: str
    scope: str | None
    counted: bool
    exit_code: int | None
    #: "in place", "new pod", "on another node", or "" when nothing was restarted.
    restart: str
    recovery_seconds: float | None
    pods: tuple[str, ...]

    @property
    def label(self) -> str:
        """``Exited 137 → restarted (new pod) · 2.0 s``, ``Hang → restarted (in place) · 1.0 s``."""
        what = self.fault + (f" {self.exit_code}" if self.exit_code is not None else "")
        if not self.restart:
            return f"{what} → {self.action}"
        scope = f", scope {self.scope}" if self.scope not in (None, "Pod") else ""
        recovery = f"{self.recovery_seconds:.1f} s" if self.recovery_seconds is not None else "not recovered"
        return f"{what} → restarted ({self.restart}{scope}) · {recovery}"


@dataclass(frozen=True)
class ScaleStep:
    at: float
    role: str
    #: "scaleout" or "scalein"
    operation: str
    #: "request" (scale, apply), "grow" (capacity returned) or "shrink" (a failed pod left out)
    cause: str
    pods: tuple[str, ...]
    replicas: int | None = None

    @property
    def label(self) -> str:
        if self.replicas is not None:
            return f"{self.role} → {self.replicas}"
        return f"{self.role} {'+' if self.operation == 'scaleout' else '-'}{len(self.pods)}"


@dataclass(frozen=True)
class Timeline:
    job: str
    start: float
    end: float
    phases: tuple[Segment, ...]
    lanes: tuple[Lane, ...]
    faults: tuple[FaultMark, ...]
    scale_steps: tuple[ScaleStep, ...]

    def lane(self, pod: str) -> Lane:
        return next(lane for lane in self.lanes if lane.pod == pod)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for mark, entry in zip(self.faults, data["faults"], strict=True):
            entry["label"] = mark.label
        for step, entry in zip(self.scale_steps, data["scale_steps"], strict=True):
            entry["label"] = step.label
        return data


def status_of(document: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """(job name, status) from a job resource (``get -o json``) or a bare status with a ``job`` key."""
    if isinstance(document.get("status"), Mapping):
        name = document.get("metadata", {}).get("name", "job")
        return str(name), document["status"]
    if "history" in document or "phase" in document:
        return str(document.get("job", "job")), document
    raise ValueError("neither a job (with status) nor a job status (with phase and history)")


def build(job: str, status: Mapping[str, Any], now: float | None = None) -> Timeline:
    """The timeline of ``job`` up to its completion, or up to ``now`` (default: the latest time recorded)."""
    history = [HistoryEntry.model_validate(entry) for entry in status.get("history", [])]
    transitions = [PhaseTransition.model_validate(t) for t in status.get("transitions", [])]
    pods = [_PodInfo.of(pod) for pod in status.get("pods", [])]
    start = _start(status, transitions, history)
    end = _end(status, transitions, history, pods, now)
    builder = _Builder(job, pods, start)
    builder.replay(history, transitions, end)
    return Timeline(
        job=job,
        start=start,
        end=end,
        phases=_phases(transitions, end),
        lanes=builder.lanes(end),
        faults=tuple(builder.faults),
        scale_steps=tuple(builder.steps),
    )


# ---- reading the status --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PodInfo:
    name: str
    role: str
    index: int
    phase: str
    running_since: float | None

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> _PodInfo:
        since = pod.get("runningSince")
        return cls(
            name=str(pod["name"]),
            role=str(pod.get("role", "")),
            index=int(pod.get("index", 0)),
            phase=str(pod.get("phase", "")),
            running_since=float(since) if isinstance(since, int | float) else None,
        )


def _start(
    status: Mapping[str, Any], transitions: list[PhaseTransition], history: list[HistoryEntry]
) -> float:
    candidates = [t.at for t in transitions[:1]] + [e.at for e in history[:1]]
    if isinstance(status.get("startedAt"), int | float):
        candidates.append(float(status["startedAt"]))
    return min(candidates, default=0.0)


def _end(
    status: Mapping[str, Any],
    transitions: list[PhaseTransition],
    history: list[HistoryEntry],
    pods: list[_PodInfo],
    now: float | None,
) -> float:
    completed = status.get("completedAt")
    if isinstance(completed, int | float):
        return float(completed)
    times = [t.at for t in transitions] + [e.at for e in history]
    times += [e.recovered_at for e in history if e.recovered_at is not None]
    times += [p.running_since for p in pods if p.running_since is not None]
    latest = max(times, default=0.0)
    return max(latest, now) if now is not None else latest


def _phases(transitions: list[PhaseTransition], end: float) -> tuple[Segment, ...]:
    segments = []
    for position, current in enumerate(transitions):
        until = transitions[position + 1].at if position + 1 < len(transitions) else end
        if until > current.at:
            segments.append(Segment(current.at, until, current.to_phase.value))
    return tuple(segments)


# ---- replaying the history ---------------------------------------------------------------------------


@dataclass
class _Lane:
    role: str
    index: int
    segments: list[Segment] = field(default_factory=list)
    state: PodState | None = None
    since: float = 0.0
    #: The history entry that took it down (its recovery brings it back).
    down_by: int | None = None


class _Builder:
    def __init__(self, job: str, pods: Sequence[_PodInfo], start: float) -> None:
        self.job = job
        self.pods = {pod.name: pod for pod in pods}
        self.start = start
        self.by_name: dict[str, _Lane] = {}
        self.faults: list[FaultMark] = []
        self.steps: list[ScaleStep] = []

    # ---- lanes ----

    def lane(self, name: str) -> _Lane:
        if name not in self.by_name:
            info = self.pods.get(name)
            role, index = (info.role, info.index) if info else _parse_name(self.job, name)
            self.by_name[name] = _Lane(role, index)
        return self.by_name[name]

    def switch(self, name: str, state: PodState | None, at: float, down_by: int | None = None) -> None:
        lane = self.lane(name)
        if lane.state is not None and at > lane.since:
            lane.segments.append(Segment(lane.since, at, lane.state.value))
        lane.state, lane.since, lane.down_by = state, at, down_by

    def present(self, role: str | None = None) -> list[str]:
        return [n for n, lane in self.by_name.items() if lane.state is not None and role in (None, lane.role)]

    def lanes(self, end: float) -> tuple[Lane, ...]:
        for name in self.present():
            self.switch(name, None, end)
        order = {
            role: position for position, role in enumerate(dict.fromkeys(p.role for p in self.pods.values()))
        }
        ordered = sorted(
            self.by_name.items(), key=lambda item: (order.get(item[1].role, 99), item[1].role, item[1].index)
        )
        return tuple(Lane(name, lane.role, lane.index, tuple(lane.segments)) for name, lane in ordered)

    # ---- events ----

    def replay(self, history: list[HistoryEntry], transitions: list[PhaseTransition], end: float) -> None:
        introduced = _introduced(history)
        for name in [*self.pods, *(e.pod for e in history if e.pod)]:
            if name not in introduced and name not in self.by_name:
                self.switch(name, PodState.STARTING, self.start)
        # (time, order, what): recoveries, then "running" news, then history entries in their order.
        timed: list[tuple[float, int, int, Any]] = []
        for position, entry in enumerate(history):
            timed.append((entry.at, 2, position, entry))
            if entry.recovered_at is not None:
                timed.append((entry.recovered_at, 0, position, ("recovered", entry.seq)))
        for position, transition in enumerate(transitions):
            if transition.to_phase is JobPhase.RUNNING:
                timed.append((transition.at, 1, position, ("all-running", None)))
        for position, pod in enumerate(self.pods.values()):
            if pod.running_since is not None:
                timed.append((pod.running_since, 1, position, ("pod-running", pod.name)))
        for at, _, _, what in sorted(timed, key=lambda item: item[:3]):
            if at > end:
                break
            if isinstance(what, HistoryEntry):
                self.entry(what)
            elif what[0] == "recovered":
                self.recovered(what[1], at)
            elif what[0] == "all-running":
                for name in self.present():
                    if self.by_name[name].state is PodState.STARTING:
                        self.switch(name, PodState.RUNNING, at)
            elif what[1] in self.by_name and self.by_name[what[1]].state is PodState.STARTING:
                self.switch(what[1], PodState.RUNNING, at)

    def recovered(self, seq: int, at: float) -> None:
        for name in self.present():
            if self.by_name[name].down_by == seq:
                self.switch(name, PodState.RUNNING, at)

    def entry(self, entry: HistoryEntry) -> None:
        if entry.kind == "fault" and entry.pod is not None:
            self.fault(entry, entry.pod)
        elif entry.kind in ("scale", "grow"):
            pods = entry.pods
            operation = "scaleout" if entry.kind == "grow" else entry.action.value
            replicas = entry.counters.get("replicas")
            cause = "grow" if entry.kind == "grow" else "request"
            self.steps.append(ScaleStep(entry.at, entry.role or "", operation, cause, pods, replicas))
            for name in pods:
                self.switch(name, PodState.STARTING if operation == "scaleout" else None, entry.at)

    def fault(self, entry: HistoryEntry, pod: str) -> None:
        lane = self.lane(pod)
        kind = entry.fault.value if entry.fault is not None else ""
        if entry.action in ("restart-in-place", "restart-workers"):
            restart, targets = "in place", [pod]
        elif entry.action == "restart":
            restart = "on another node" if kind in _MOVED else "new pod"
            scope = entry.scope or "Pod"
            targets = [pod] + [
                name
                for name in self.present(lane.role if scope == "Replica" else None)
                if scope != "Pod" and name != pod
            ]
        else:
            restart, targets = "", [pod]
        self.faults.append(
            FaultMark(
                seq=entry.seq,
                at=entry.at,
                pod=pod,
                fault=kind,
                action=entry.action.value,
                scope=entry.scope,
                counted=entry.counted,
                exit_code=entry.exit_code,
                restart=restart,
                recovery_seconds=entry.recovery_seconds,
                pods=tuple(targets),
            )
        )
        own = PodState.HUNG if kind == "Hang" else PodState.LOST if kind in _LOST else PodState.FAILED
        if entry.action.value in _ENDING_ACTIONS:
            self.switch(pod, own, entry.at)
            self.switch(pod, None, entry.at)  # failed for good or left out: the lane ends here
            if entry.action == "shrink":
                self.steps.append(ScaleStep(entry.at, lane.role, "scalein", "shrink", (pod,)))
            return
        for name in targets:
            self.switch(name, own if name == pod else PodState.RESTARTING, entry.at, down_by=entry.seq)


def _introduced(history: list[HistoryEntry]) -> set[str]:
    """Pods that a scale-out or grow step brought in before anything else mentioned them."""
    mentioned: set[str] = set()
    introduced: set[str] = set()
    for entry in history:
        named = entry.pods if entry.kind in ("scale", "grow") else ((entry.pod,) if entry.pod else ())
        adds = entry.kind == "grow" or (entry.kind == "scale" and entry.action == "scaleout")
        for name in named:
            if adds and name not in mentioned:
                introduced.add(name)
            mentioned.add(name)
    return introduced


def _parse_name(job: str, pod: str) -> tuple[str, int]:
    """``<job>-<role>-<index>`` -> (role, index), for pods the status no longer lists."""
    rest = pod[len(job) + 1 :] if pod.startswith(f"{job}-") else pod
    role, _, index = rest.rpartition("-")
    return (role, int(index)) if index.isdigit() else (rest, 0)
