"""A job's status: what users read (phase, conditions, pods, restart counts, history) and everything the
controller needs to pick up where it left off (policy counters, scheduled restarts, issued action keys).

All of it round-trips through JSON (``to_dict`` / ``from_dict``), so a controller that restarts from a stored
status forgets nothing and repeats nothing. Field names are the camelCase of the Kubernetes status; times
are seconds on the controller's clock.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from trainguard.controller.phases import JobPhase, PodPhase
from trainguard.policy.codec import StateCodec
from trainguard.policy.types import FaultKind, PodRef, PolicyState, Remedy


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")


#: The condition of a job some of whose pods run without the agent (their images have no python3).
AGENT_UNAVAILABLE = "AgentUnavailable"


class Condition(_Model):
    """One condition per phase type, as CCE's operator writes them; only the current phase's is ``"True"``.
    Beside them, ``AgentUnavailable`` while pods run without the agent."""

    type: JobPhase | Literal["AgentUnavailable"]
    status: str
    reason: str
    message: str
    last_transition_time: float
    last_probe_time: float


class PhaseTransition(_Model):
    from_phase: JobPhase | None = Field(alias="from")
    to_phase: JobPhase = Field(alias="to")
    at: float
    reason: str


class SuspectedHang(_Model):
    """Detection only (a GPU job with hang handling off): the pod's agent suspects a hang; nothing is done."""

    #: The progress signal that went quiet last (io, cpu, log, heartbeat).
    signal: str
    #: How long it had been quiet when the agent said so.
    idle_seconds: float
    #: When the controller first saw it.
    since: float


class PodStatus(_Model):
    """One pod slot, ``<job>-<role>-<index>``, across its incarnations."""

    name: str
    role: str
    index: int
    phase: PodPhase
    node: str | None = None
    #: The current incarnation's network address, once seen (its IP on Kubernetes).
    address: str | None = None
    #: Relaunches so far (RESTARTS): incarnations started again after a fault. A hang restart in place
    #: involves no rescheduling and is not among them (``hang_restarts``).
    restarts: int = 0
    #: Hang restarts in place so far, over all incarnations: a hung command stopped and run again in its pod.
    hang_restarts: int = 0
    #: The agent's detection only suspects the current incarnation hangs (the job may be suspended); None
    #: once progress resumed.
    suspected_hang: SuspectedHang | None = None
    #: A live pod's hot spares warm and waiting to be called (``trainguard.io/live-spares``); None without.
    spares: int | None = None
    #: The incarnation that should exist now; older ones are being removed.
    generation: int = 1
    #: Restarts in place asked of the agent in this incarnation.
    in_place_restarts: int = 0
    #: Restarts of workers inside this incarnation (by torchrun) already in the history.
    worker_restarts: int = 0
    #: When a Waiting slot is launched.
    due_at: float | None = None
    #: Fencing: the previous incarnation ran on a node that is not Ready, where nothing confirms its end; its
    #: agent has ended its workers by this time, and the replacement is not launched before (``due_at`` is at
    #: least this). None: no incarnation of this slot is fenced.
    fenced_until: float | None = None
    #: When this incarnation was launched (start deadline of restartTimeLimit).
    launched_at: float | None = None
    running_since: float | None = None
    #: The current incarnation has been seen by the backend (so its disappearance is news).
    seen: bool = False
    avoid_nodes: tuple[str, ...] = ()
    #: The last progress time already given to the policy.
    progress_at: float | None = None
    #: History entries (their ``seq``) of faults not yet recovered from.
    open_faults: tuple[int, ...] = ()
    #: Why an elastic shrink left the slot out (a fault kind), for growing back.
    shrunk_for: str | None = None
    #: Why the current incarnation was started: "start", "restart", "scale", "grow" or "resume".
    cause: str = "start"
    #: When the scale step that added this slot was accepted, while its pod does not run yet (the scaling
    #: timeout counts from it); None once it ran, and for slots no scale-out added.
    scaled_at: float | None = None
    #: Why the slot ended as it did (permanent failure, scale-in, cleanup).
    message: str = ""

    @property
    def ref(self) -> PodRef:
        return PodRef(self.role, self.index)


class HistoryKind(str, Enum):
    """What a history entry records."""

    def __str__(self) -> str:  # the word, as in the status and the metrics
        return str(self.value)

    #: A fault of a pod (or of the job: a deadline) and what the policy did about it.
    FAULT = "fault"
    #: A scale step users asked for (``scale``, an edit of the job's replicas).
    SCALE = "scale"
    #: A scale request refused (outside [minReplicas, maxReplicas], an unknown role).
    SCALE_REJECTED = "scale-rejected"
    #: A scale-out whose pods did not all run within ``scaling.timeoutSeconds``: rolled back or failed.
    SCALE_TIMEOUT = "scale-timeout"
    #: Capacity returned and a role shrunk for want of it grew back.
    GROW = "grow"
    #: The survivors of a lost peer released from their connections to it (or why they were not).
    RELEASE = "release"
    #: A live job's workers (``trainguard.Live``) re-formed their process group in their own processes (a
    #: new round): nothing was restarted or counted.
    REFORMED = "reformed"
    #: A node isolated because its fault tolerance check found faulty hardware (or why it was not).
    ISOLATE = "isolate"
    #: A rank that works much longer per step than the others (``trainguard.policy.stragglers``).
    STRAGGLER = "straggler"


class IsolationOutcome(str, Enum):
    """The ``action`` of an isolate entry."""

    def __str__(self) -> str:  # the word, as in the status and the metrics
        return str(self.value)

    #: The node was isolated (tainted on Kubernetes): no pod of any job lands there until it is released.
    ISOLATED = "isolate"
    #: Not isolated: the bound on isolations was reached; the entry's reason says which.
    REFUSED = "refuse"


class CheckFinding(_Model):
    """One item of a fault tolerance check, as a pod's agent read it (``trainguard.pod.checks.CheckItem``)."""

    name: str
    verdict: str
    value: float | None = None
    threshold: float | None = None
    detail: str = ""


class CheckRecord(_Model):
    """A fault tolerance check of a node, as a history entry or the job's latest per node keeps it."""

    #: ``pre`` (before the command), ``periodic``, ``post`` (after the command failed).
    phase: str
    #: The agent's wall clock.
    at: float
    #: The worst of the items': ``ok``, ``hardware``, ``environment``.
    verdict: str
    #: The pod whose agent ran it, and the node it ran on (the backend's word, never the pod's).
    pod: str | None = None
    node: str | None = None
    seconds: float = 0.0
    #: ModelArts' scenario (1-4) where the check decided a fault; None for a check that decided nothing.
    scenario: int | None = None
    #: The items that did not pass (all of them for a check that passed: none).
    failed: tuple[CheckFinding, ...] = ()
    #: How many items ran (skipped ones included).
    items: int = 0


class StragglerRecord(_Model):
    """A straggler as found: its rank, its work per step against the other ranks' median, over how many steps."""

    rank: int
    steps: int
    seconds: float
    others: float
    ratio: float


class LinkRecord(_Model):
    """What one pod sent the next pod of its role in the pre-check's bandwidth probe (``net.bandwidth``)."""

    pod: str
    node: str | None = None
    #: MB/s (10^6 bytes a second).
    mbps: float
    #: The role's median over the pods that reported, when this one was named the slowest.
    median: float | None = None


class FaultCheckStatus(_Model):
    """The job's fault tolerance check: what its agents found and what was done about it."""

    #: The latest check of each node the job's pods ran on (at most ``MAX_CHECKED_NODES``, newest kept).
    nodes: tuple[CheckRecord, ...] = ()
    #: Pods issued again after a failed check (what faultCheck.maxReissues bounds).
    reissues: int = 0
    #: The nodes isolated because of this job's checks.
    isolated: tuple[str, ...] = ()
    #: Pod -> when it was issued again and not yet running (faultCheck.reissueTimeoutSeconds).
    waiting: dict[str, float] = Field(default_factory=dict)
    #: ``<pod>#<generation>`` of the incarnations found straggling (each is recorded once).
    stragglers: tuple[str, ...] = ()
    #: Each pod's latest bandwidth probe (at most ``MAX_CHECKED_NODES``, by pod name).
    links: tuple[LinkRecord, ...] = ()
    #: The slowest pod of the probe, where it is well below its role's others (``policy.faultcheck.slow_link``).
    slow_link: LinkRecord | None = None


class ReleaseOutcome(str, Enum):
    """The ``action`` of a release entry."""

    def __str__(self) -> str:  # the word, as in the status and the metrics
        return str(self.value)

    #: Their connections to the lost peer were closed (``ReleaseSurvivors``).
    RELEASED = "release"
    #: Not released (turned off): they wait for their own timeout, which the entry's reason names.
    WAITS = "wait"


class LiveOrigin(str, Enum):
    """Where a live worker's state came from in a round (``trainguard.Live``'s words)."""

    def __str__(self) -> str:  # the word, as in the status
        return str(self.value)

    #: It kept its own, in its process.
    LIVE = "live"
    #: It received it from a member that held it (a newcomer, or a member behind the agreed step).
    PEER = "peer"
    #: Nobody held one: a fresh start.
    FRESH = "fresh"
    #: Restored by the script from snapshots in memory, or from a checkpoint on disk.
    MEMORY = "memory"
    DISK = "disk"


class ReformCause(str, Enum):
    """What made a live job's workers form a new round, as the engine's own history shows it."""

    def __str__(self) -> str:  # the word, as in the status
        return str(self.value)

    #: A worker or a pod of the round failed (the history's fault entries name them).
    FAULT = "fault"
    #: A scale-in removed members (``after_pods``), or a scale step timed out.
    SCALE_IN = "scale-in"
    #: A scale-out, or a grow-back, added pods (``after_pods``).
    SCALE_OUT = "scale-out"
    #: Newcomers joined without a scale step: replacements of members that failed before.
    JOINED = "joined"


class Reformation(_Model):
    """What a ``reformed`` history entry records of one live round, as its members reported it."""

    round: int
    #: The round's members.
    world_size: int | None = None
    #: The step every member agreed on.
    step: int | None = None
    #: ``peer`` when a member of the round received the state from another (a newcomer joined), else ``live``
    #: (every member kept its own), or where a state nobody held came from (``fresh``, ``memory``, ``disk``).
    origin: LiveOrigin = LiveOrigin.LIVE
    #: What ended the previous round, as a member's exception's type and first line (None: no member said):
    #: data for whoever debugs, never the words (``after`` is what a person reads).
    cause: str | None = None
    #: From the failure (or the arrival) to the state in place, as rank 0 saw it (else another member).
    seconds: float | None = None
    #: What made the round, in the job's terms (None: nothing the engine saw explains it), and the pods it
    #: names: the failed pods, or those a scale step removed or added.
    after: ReformCause | None = None
    after_pods: tuple[str, ...] = ()
    #: The size of the round before it (None: unknown).
    world_before: int | None = None


class ScaleOperation(str, Enum):
    """The ``action`` of a scale or grow entry, in CCE's words."""

    def __str__(self) -> str:  # the word, as in the status and the metrics
        return str(self.value)

    SCALE_OUT = "scaleout"
    SCALE_IN = "scalein"


class HistoryEntry(_Model):
    """One fault with what was done about it, one scaling step, a release of survivors or a live re-formation:
    an entry of the job's history.

    Every field is data for the readers (``describe``, the timeline, the metrics, the nudges of survivors):
    they read fields, never the ``reason``, which is words for people."""

    #: Numbers entries over the job's life (the oldest are dropped past ``MAX_HISTORY``).
    seq: int = 0
    at: float
    kind: HistoryKind
    #: The role the entry is about (a fault's pod's, a scale step's); None in entries of older versions.
    role: str | None = None
    pod: str | None = None
    #: The pods a scale or grow step added or removed, in the order it names them.
    pods: tuple[str, ...] = ()
    node: str | None = None
    #: A fault's pod's network address when it was lost (what a release closes connections to).
    address: str | None = None
    fault: FaultKind | None = None
    exit_code: int | None = None
    rule: str | None = None
    #: A fault's remedy, a scale step's operation ("none" for a rejected scale request), or a release's outcome;
    #: "none" for a live round (the workers re-formed by themselves).
    action: Remedy | ScaleOperation | ReleaseOutcome | IsolationOutcome
    scope: str | None = None
    counted: bool = False
    #: A scale step's (or rejected request's) replicas of the role before and after (asked for).
    scale_from: int | None = None
    scale_to: int | None = None
    reason: str
    #: podRestarts / roleRestarts / jobRestarts / consecutiveHangs after the decision.
    counters: dict[str, int] = Field(default_factory=dict)
    recovered_at: float | None = None
    #: From the fault to the replacement running again.
    recovery_seconds: float | None = None
    #: The round a ``reformed`` entry records.
    reformation: Reformation | None = None
    #: The fault tolerance check behind a fault (the failed one; a post-check that passed: scenario 4) or an
    #: isolation.
    check: CheckRecord | None = None
    #: A straggler entry's (or a Straggler fault's) figures.
    straggler: StragglerRecord | None = None
    #: A restart of pods on a node that is not Ready: their replacements wait until then, when the old
    #: incarnations' agents have ended their workers (fencing, ``PodStatus.fenced_until``).
    fenced_until: float | None = None


class JobStatus(_Model):
    phase: JobPhase = JobPhase.PENDING
    conditions: tuple[Condition, ...] = ()
    #: The latest phase changes (at most ``MAX_TRANSITIONS``).
    transitions: tuple[PhaseTransition, ...] = ()
    #: role -> restarts of the role's pods (what ``kubectl get`` shows per role): relaunches, one per
    #: decision, not the hang restarts in place.
    restart_counts: dict[str, int] = Field(default_factory=dict)
    #: role -> hang restarts in place of the role's pods (not in ``restart_counts``).
    hang_restart_counts: dict[str, int] = Field(default_factory=dict)
    #: role -> pods that belong to the role now (running, starting, waiting, finished).
    replicas: dict[str, int] = Field(default_factory=dict)
    #: role -> pods the role should have (the spec's replicas, then the latest accepted scale).
    desired: dict[str, int] = Field(default_factory=dict)
    #: role -> the spec's replicas as last seen, to notice an edit of the resource.
    spec_replicas: dict[str, int] = Field(default_factory=dict)
    #: Accepted scale operations so far ("job version" of the Scaling message).
    scale_version: int = 0
    handled_scale_requests: tuple[str, ...] = ()
    #: The latest scale step as CCE's operator words it (the Scaling condition's message).
    scaling_message: str = ""
    pods: tuple[PodStatus, ...] = ()
    history: tuple[HistoryEntry, ...] = ()
    #: ``PolicyState.to_dict()``.
    policy_state: dict[str, Any] = Field(default_factory=dict)
    #: Idempotency keys of the actions issued so far (the latest ones; see ``MAX_ISSUED_KEYS``).
    issued_keys: tuple[str, ...] = ()
    discovery: tuple[str, ...] = ()
    discovery_version: int = 0
    #: Deadline clock: reset when a suspended job resumes.
    started_at: float | None = None
    completed_at: float | None = None
    reason: str = ""
    message: str = ""
    event_seq: int = 0
    #: The highest live round (``trainguard.Live``) recorded in the history: rounds up to it are not new.
    live_round: int = 0
    #: The Warning Event that the job's script does not use live mode was emitted.
    live_unused_warned: bool = False
    #: The Warning Event that the job asks for live mode but runs without it (``live_refusal``) was emitted.
    live_off_warned: bool = False
    #: The fault tolerance check (``trainguard.policy.faultcheck``); None until a pod reports a check.
    fault_check: FaultCheckStatus | None = None
    #: Bumped on every change; the key of the status write.
    revision: int = 0

    def policy(self, codec: StateCodec | None = None) -> PolicyState:
        """The policy's state, read by ``codec`` (its caller's, which remembers entries read before)."""
        return (codec or StateCodec()).from_dict(self.policy_state)

    def pod(self, ref: PodRef) -> PodStatus | None:
        return next((pod for pod in self.pods if pod.role == ref.role and pod.index == ref.index), None)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobStatus:
        return cls.model_validate(data)


def saved_policy(state: PolicyState, codec: StateCodec | None = None) -> dict[str, Any]:
    """``state.to_dict()`` for ``JobStatus.policy_state`` (read back by ``JobStatus.policy``), written by
    ``codec`` (its caller's, which remembers entries written before)."""
    return (codec or StateCodec()).to_dict(state)


MAX_TRANSITIONS = 200
#: History entries kept; older ones are dropped (events and logs keep the long story).
MAX_HISTORY = 500
#: Keys older than this many issues are forgotten; they belong to incarnations long replaced.
MAX_ISSUED_KEYS = 2000
#: Nodes whose latest check a job's status keeps.
MAX_CHECKED_NODES = 64
