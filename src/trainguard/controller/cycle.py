"""One reconcile's scratchpad: the status being built, and the actions it issues.

Only ``reconcile`` creates a Cycle; the steps (faults, scaling, launching, phases) change it, and at the end it
is frozen into the next ``JobStatus``. Nothing in here reads a clock or talks to a backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from trainguard.api import TrainingJob, pod_name
from trainguard.controller import keys
from trainguard.controller.backend import (
    Action,
    ActionError,
    EmitEvent,
    EventType,
    Observed,
    ObservedNode,
    ObservedPod,
    TerminatePod,
)
from trainguard.controller.phases import (
    ALIVE_PHASES,
    JobPhase,
    PodPhase,
    check_job_transition,
    check_pod_transition,
)
from trainguard.controller.settled import SettledSlots
from trainguard.controller.status import (
    MAX_ISSUED_KEYS,
    HistoryEntry,
    JobStatus,
    PhaseTransition,
    PodStatus,
)
from trainguard.policy.codec import StateCodec
from trainguard.policy.types import PodRef, PolicyState

_INDEX = attrgetter("index")
#: Launches of one incarnation, the first included, when each had to wait for the previous one to be gone.
MAX_LAUNCH_ATTEMPTS = 20


@dataclass
class Cycle:
    job: TrainingJob
    now: float
    observed: Observed
    before: JobStatus
    state: PolicyState
    phase: JobPhase
    slots: dict[str, PodStatus]
    desired: dict[str, int]
    history: list[HistoryEntry]
    issued: dict[str, None]
    event_seq: int
    actions: list[Action] = field(default_factory=list)
    #: Changes to JobStatus fields not listed above (scale_version, discovery, reason, ...).
    updates: dict[str, Any] = field(default_factory=dict)
    #: The condition of the phase, as this cycle sees it: (reason, message).
    phase_words: tuple[str, str] | None = None
    transitions: list[PhaseTransition] = field(default_factory=list)
    #: The policy state as the cycle started, to tell whether it changed.
    initial_state: PolicyState | None = None
    #: The caller's memory of settled slots (``faults.SettledSlots``), if it keeps one.
    settled: SettledSlots | None = None
    #: What reads and writes this job's policy state: the caller's (``SettledSlots.codec_of``), or a plain one.
    codec: StateCodec | None = None
    #: The observation indexed by name (pods of a slot, nodes, failed launches), so that lookups do not
    #: scan it.
    _pods_by_name: dict[str, list[ObservedPod]] = field(default_factory=dict)
    _nodes_by_name: dict[str, ObservedNode] = field(default_factory=dict)
    _errors_by_key: dict[str, ActionError] = field(default_factory=dict)
    #: Slot names by role, each in index order; None until asked for, and again after a slot is added.
    _names_by_role: dict[str, list[str]] | None = None
    _names_count: int = 0

    def __post_init__(self) -> None:
        pods = self.observed.pods
        self._pods_by_name = {pod.name: [pod] for pod in pods}
        if len(self._pods_by_name) != len(pods):  # some name listed twice (an old incarnation still there)
            self._pods_by_name = {}
            for pod in pods:
                self._pods_by_name.setdefault(pod.name, []).append(pod)
        self._nodes_by_name = {node.name: node for node in self.observed.nodes}
        for error in reversed(self.observed.errors):  # the first error of a key wins, as a scan finds it
            self._errors_by_key[error.key] = error

    @classmethod
    def start(
        cls,
        job: TrainingJob,
        status: JobStatus,
        observed: Observed,
        now: float,
        settled: SettledSlots | None = None,
    ) -> Cycle:
        codec = settled.codec_of(keys.job_key(job)) if settled is not None else None
        return cls(
            job=job,
            now=now,
            observed=observed,
            before=status,
            state=(state := status.policy(codec)),
            initial_state=state,
            phase=status.phase,
            slots={pod.name: pod for pod in status.pods},
            desired=dict(status.desired),
            history=list(status.history),
            issued=dict.fromkeys(status.issued_keys),
            event_seq=status.event_seq,
            settled=settled,
            codec=codec,
        )

    # ---- looking things up ------------------------------------------------------------------------

    def get(self, name: str) -> Any:
        """A JobStatus field as this cycle has it so far."""
        return self.updates.get(name, getattr(self.before, name))

    def name_of(self, ref: PodRef) -> str:
        return pod_name(self.job.name, ref.role, ref.index)

    def slot(self, ref: PodRef) -> PodStatus | None:
        return self.slots.get(self.name_of(ref))

    def role_slots(self, role: str) -> list[PodStatus]:
        slots = self.slots
        return [slots[name] for name in self._role_names().get(role, ())]

    def ordered_slots(self) -> list[PodStatus]:
        """Roles in the job's order, then by index: the order every step walks pods in (a new list)."""
        slots = self.slots
        return [slots[name] for name in self.ordered_names()]

    def ordered_names(self) -> list[str]:
        """The names of ``ordered_slots``."""
        by_role = self._role_names()
        return [name for role in self.job.spec.replica_specs for name in by_role.get(role, ())]

    def _role_names(self) -> dict[str, list[str]]:
        """Sorted once per cycle: slots change on every step, but which names there are, and their roles and
        indices, only when one is added (slots are never taken out: a scaled-in one stays as Removed)."""
        by_role = self._names_by_role
        if by_role is None or self._names_count != len(self.slots):
            groups: dict[str, list[PodStatus]] = {}
            for slot in self.slots.values():
                groups.setdefault(slot.role, []).append(slot)
            by_role = {role: [s.name for s in sorted(group, key=_INDEX)] for role, group in groups.items()}
            self._names_by_role, self._names_count = by_role, len(self.slots)
        return by_role

    def slot_counts(self) -> dict[str, int]:
        """role -> its pod slots 0..N-1 that its complete and fail policies are judged over (shrunk ones
        included, removed ones not)."""
        counts = dict.fromkeys(self.job.spec.replica_specs, 0)
        for slot in self.slots.values():
            if slot.phase is not PodPhase.REMOVED and slot.role in counts:
                counts[slot.role] += 1
        return counts

    def alive(self) -> dict[str, int]:
        """role -> pods that are up or coming up (not finished, failed or left out)."""
        counts = dict.fromkeys(self.job.spec.replica_specs, 0)
        for slot in self.slots.values():
            if slot.phase in ALIVE_PHASES:
                counts[slot.role] = counts.get(slot.role, 0) + 1
        return counts

    def node(self, name: str | None) -> ObservedNode | None:
        return self._nodes_by_name.get(name) if name else None

    def observed_pods(self, name: str) -> Sequence[ObservedPod]:
        return self._pods_by_name.get(name, ())

    def launch_error(self, key: str) -> ActionError | None:
        return self._errors_by_key.get(key) if self._errors_by_key else None

    def launch_attempt(self, slot: PodStatus) -> tuple[str, ActionError | None]:
        """The key of the slot's current launch and its error, if it failed. A launch that had to wait
        (a transient error: the pod's previous incarnation was still there) is followed by another under the
        next key, up to ``MAX_LAUNCH_ATTEMPTS``."""
        key = keys.launch(self.job, slot.name, slot.generation)
        error = self.launch_error(key)
        attempt = 1
        while error is not None and error.transient and attempt < MAX_LAUNCH_ATTEMPTS:
            attempt += 1
            key = keys.launch_again(self.job, slot.name, slot.generation, attempt)
            error = self.launch_error(key)
        return key, error

    # ---- changing things --------------------------------------------------------------------------

    def put(self, slot: PodStatus, **changes: Any) -> PodStatus:
        """Replace a slot, checking its phase change against the state machine."""
        if "phase" in changes:
            check_pod_transition(slot.phase, changes["phase"])
        updated = slot.model_copy(update=changes)
        self.slots[updated.name] = updated
        return updated

    def add(self, slot: PodStatus) -> None:
        """A new slot, or a new start of a slot's name (a scaled-in index that comes back)."""
        self.slots[slot.name] = slot
        self._names_by_role = None

    def issue(self, action: Action) -> bool:
        """Queue an action unless its key was issued before; True when it is new."""
        if action.key in self.issued:
            return False
        self.issued[action.key] = None
        self.actions.append(action)
        return True

    def emit(self, type_: EventType, reason: str, message: str, pod: str | None = None) -> None:
        self.event_seq += 1
        key = keys.event(self.job, self.event_seq)
        self.issue(EmitEvent(key, type_, reason, message, self.now, pod))

    def remove_stuck(self, pod: ObservedPod, reason: str) -> None:
        """Remove at once an incarnation that is terminating and will not finish by itself."""
        key = keys.remove_stuck(self.job, pod.name, pod.generation)
        if self.issue(TerminatePod(key, pod.name, pod.generation, reason, force=True)):
            self.emit(
                EventType.WARNING, "ForceDeletePod", f"removing pod {pod.name} at once: {reason}", pod.name
            )

    def terminate(self, name: str, generation: int, reason: str, force: bool = False) -> None:
        """Remove one incarnation of a pod (if it is still there and not already being removed)."""
        present = any(
            pod.generation == generation and not pod.terminating for pod in self.observed_pods(name)
        )
        if present and self.issue(
            TerminatePod(keys.terminate(self.job, name, generation), name, generation, reason, force)
        ):
            self.emit(EventType.NORMAL, "SuccessfulDeletePod", f"deleting pod {name}: {reason}", name)

    def phase_to(self, phase: JobPhase, reason: str, message: str) -> None:
        """Move the job to ``phase`` (checked against the transition table), with its condition's words."""
        check_job_transition(self.phase, phase)
        first = not self.before.transitions and not self.transitions
        if phase != self.phase or first:
            origin = None if first else self.phase
            self.transitions.append(
                PhaseTransition(from_phase=origin, to_phase=phase, at=self.now, reason=message)
            )
            type_ = EventType.WARNING if phase in (JobPhase.FAILED, JobPhase.TIMEOUT) else EventType.NORMAL
            self.emit(type_, reason, message)
        self.phase = phase
        self.phase_words = (reason, message)

    def scale_message(self, operation: str, role: str, pods: list[str]) -> None:
        """The Scaling condition's message, as CCE's operator words it (pods listed as Go prints a slice)."""
        meta = self.job.metadata
        self.updates["scaling_message"] = (
            f"trainingJob {meta.namespace}/{meta.name} {operation} Operation {operation} "
            f"scale num {len(pods)} scale pods [{' '.join(pods)}], replicas name {role} "
            f"job version {self.get('scale_version')}"
        )

    def record(self, entry: HistoryEntry) -> int:
        """Append to the history; returns the entry's ``seq``."""
        seq = self.history[-1].seq + 1 if self.history else 1
        self.history.append(entry.model_copy(update={"seq": seq}))
        return seq

    def history_entry(self, seq: int) -> tuple[int, HistoryEntry] | None:
        """The position and entry numbered ``seq``, if it is still kept."""
        first = self.history[0].seq if self.history else 0
        position = seq - first
        if 0 <= position < len(self.history) and self.history[position].seq == seq:
            return position, self.history[position]
        return None

    def issued_keys(self) -> tuple[str, ...]:
        keys_ = tuple(self.issued)
        return keys_[-MAX_ISSUED_KEYS:]
