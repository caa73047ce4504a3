"""The vocabulary shared by the policy engine and the controller.

Everything here is a frozen value: the policy never changes state in place, it returns new values
(``PolicyState.with_*``). Times are plain floats in the caller's clock; the policy never reads a clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from operator import attrgetter
from typing import Any

from trainguard.api.model import RestartScope

#: Names a Decision gives as its ``rule`` besides "faultTolerantPolicy[i]".
RULE_RESTART_POLICY = "restartPolicy"
#: CCE's ``faultTolerant: false``: no fault is recovered by the roles' rules and no role is elastic.
RULE_FAULT_TOLERANT = "faultTolerant"
RULE_HANG = "hang"
RULE_JOB_RETRY = "jobRetry"
RULE_UNCONDITIONAL_RETRY = "jobUnconditionalRetry"
RULE_TIME_LIMIT = "timeLimit"
#: The fault tolerance check: a pod issued again off a node whose check failed (``policy.faultcheck``).
RULE_FAULT_CHECK = "faultCheck"
RULE_RESTART_TIME_LIMIT = "restartTimeLimit"
#: torchrun's own restart of a pod's workers (within its --max-restarts), recorded, not decided.
RULE_TORCHRUN = "torchrun"


def rule_at(position: int) -> str:
    """The ``rule`` of the faultTolerantPolicy entry at ``position`` (0-based)."""
    return f"faultTolerantPolicy[{position}]"


class FaultKind(str, Enum):
    """What went wrong (docs/policy.md §1, Faults)."""

    def __str__(self) -> str:  # the word, as in the status and the metrics
        return str(self.value)

    EXITED = "Exited"
    OOM_KILLED = "OOMKilled"
    NODE_NOT_READY = "NodeNotReady"
    POD_FORCE_DELETED = "PodForceDeleted"
    POD_EVICTED = "PodEvicted"
    HANG = "Hang"
    START_TIMEOUT = "StartTimeout"
    DEADLINE = "Deadline"
    #: The agent's check found the node's hardware faulty (before the command, or ending it).
    HARDWARE_FAULT = "HardwareFault"
    #: The agent's pre-check failed on working hardware (a full disk, an unreachable rendezvous).
    PRE_CHECK_FAILED = "PreCheckFailed"
    #: A rank that works much longer per step than the others, treated as a fault of its node (opt-in).
    STRAGGLER = "Straggler"


@dataclass(frozen=True, order=True)
class PodRef:
    """Identity of a pod slot: the role's name as in the job's replicaSpecs, and the index."""

    role: str
    index: int

    def __str__(self) -> str:
        return f"{self.role}-{self.index}"


@dataclass(frozen=True)
class Observation:
    """What a backend saw about one pod, raw; ``policy.classify`` turns it into a Fault (or None)."""

    pod: PodRef
    at: float
    #: "Pending" | "Running" | "Succeeded" | "Failed" | "Deleted" | "Unknown"
    phase: str
    exit_code: int | None = None
    #: Killed by signal N; reported as exit code 128+N when no exit code is known.
    signal: int | None = None
    #: e.g. "OOMKilled", "Evicted", "Preempted", "DisruptionTarget", "Hang"
    reason: str | None = None
    node: str | None = None
    node_ready: bool = True
    #: A disappearance trainguard asked for is not a fault.
    deleted_by_us: bool = False


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    #: None for job-level faults (Deadline).
    pod: PodRef | None
    at: float
    exit_code: int | None = None
    node: str | None = None
    #: Words for describe and the history.
    message: str = ""


class Remedy(str, Enum):
    """What the controller does about a fault; these are the words ``trainguard explain`` prints."""

    def __str__(self) -> str:  # the word, as in the status and the metrics
        return str(self.value)

    RESTART = "restart"
    RESTART_IN_PLACE = "restart-in-place"
    #: torchrun restarted the pod's failed workers inside the pod (the pod itself went on).
    RESTART_WORKERS = "restart-workers"
    SHRINK = "shrink"
    NONE = "none"
    FAIL_ROLE = "fail-role"
    FAIL_JOB = "fail-job"


@dataclass(frozen=True)
class Decision:
    fault: Fault
    action: Remedy
    #: Pod / Replica / All for restarts; None otherwise.
    scope: RestartScope | None
    #: "faultTolerantPolicy[0]", "restartPolicy", "hang", "jobRetry", "timeLimit", ...
    rule: str
    #: Counts toward restartLimit/backoffLimit (and job-retry-num for job retries).
    counted: bool
    #: A sentence a user reads in describe/explain.
    reason: str
    #: The pods the action applies to (every pod of the role for Replica, of the job for All).
    pods: tuple[PodRef, ...] = ()
    #: Backoff before the restart.
    delay_seconds: float = 0.0
    #: The faulted pod must not come back on the node it was on.
    replace_node: bool = False
    #: The faulted pod has failed for good (no restart); it stays failed until the role grows back.
    permanent: bool = False
    #: The pod ran healthily long enough before this fault to reset its backoff and retry streaks.
    healthy_before: bool = False
    #: The limit that stopped a restart: "restartLimit", "backoffLimit", "jobRetryNum", ... or None.
    limit: str | None = None
    #: Counted restart times of the role at or before this moment have left the window (may be dropped).
    window_start: float | None = None


@dataclass(frozen=True)
class PodCounters:
    """Per pod slot; survives serialization."""

    #: Restarts of this slot that replaced its pod, counted or not (shown as RESTARTS); hang restarts in place
    #: are not among them.
    restarts: int = 0
    consecutive_hangs: int = 0
    #: Restarts in a row without healthy running; drives the exponential delay.
    backoff_streak: int = 0
    last_restart_at: float | None = None
    running_since: float | None = None


#: PodRef's own order (role, then index) as a sort key, which sorts thousands of pods faster than comparing.
REF_ORDER = attrgetter("role", "index")


@dataclass(frozen=True)
class PolicyState:
    """Everything decide() needs from the past. Never mutate the mappings; use the with_* helpers."""

    #: role -> times of counted restarts (for the restartLimit window)
    counted_restarts: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    #: role -> restart count shown in status.restartCounts (counted or not; hang restarts in place excluded)
    role_restarts: Mapping[str, int] = field(default_factory=dict)
    #: Counted restarts of the job (backoffLimit).
    job_restarts: int = 0
    #: ModelArts job-retry-num spent.
    job_retries: int = 0
    #: ModelArts unconditional retries in a row.
    unconditional_streak: int = 0
    pods: Mapping[PodRef, PodCounters] = field(default_factory=dict)
    #: Permanently failed pods.
    failed_pods: frozenset[PodRef] = frozenset()
    succeeded_pods: frozenset[PodRef] = frozenset()
    #: role -> why it failed (a fail-role or fail-job decision).
    failed_roles: Mapping[str, str] = field(default_factory=dict)
    #: Why the job failed (a fail-job decision), or None.
    job_failure: str | None = None
    #: The job failed because it ran past its timeLimit.
    timed_out: bool = False

    def pod(self, ref: PodRef) -> PodCounters:
        return self.pods.get(ref, PodCounters())

    def with_pod(self, ref: PodRef, counters: PodCounters) -> PolicyState:
        return replace(self, pods={**self.pods, ref: counters})

    def with_failed_role(self, role: str, reason: str) -> PolicyState:
        return replace(self, failed_roles={**self.failed_roles, role: reason})

    def to_dict(self, write_pods: PodsWriter | None = None) -> dict[str, Any]:
        """JSON-able data, for the store or the Kubernetes status (``write_pods``: how the pods' counters are
        written, ``pods_to_list`` unless a ``StateCodec`` reuses the entries it wrote before)."""
        return {
            "countedRestarts": {role: list(times) for role, times in sorted(self.counted_restarts.items())},
            "roleRestarts": dict(sorted(self.role_restarts.items())),
            "jobRestarts": self.job_restarts,
            "jobRetries": self.job_retries,
            "unconditionalStreak": self.unconditional_streak,
            "pods": (write_pods or pods_to_list)(self.pods),
            "failedPods": [_ref_to_dict(ref) for ref in sorted(self.failed_pods)],
            "succeededPods": [_ref_to_dict(ref) for ref in sorted(self.succeeded_pods)],
            "failedRoles": dict(sorted(self.failed_roles.items())),
            "jobFailure": self.job_failure,
            "timedOut": self.timed_out,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], read_pods: PodsReader | None = None) -> PolicyState:
        """The inverse of to_dict; raises ValueError on data that to_dict cannot have written (``read_pods``:
        how the pods' entries are read, ``pods_from_list`` unless a ``StateCodec`` remembers them)."""
        try:
            return cls(
                counted_restarts={
                    str(role): tuple(float(t) for t in times)
                    for role, times in data.get("countedRestarts", {}).items()
                },
                role_restarts={str(role): int(n) for role, n in data.get("roleRestarts", {}).items()},
                job_restarts=int(data.get("jobRestarts", 0)),
                job_retries=int(data.get("jobRetries", 0)),
                unconditional_streak=int(data.get("unconditionalStreak", 0)),
                pods=(read_pods or pods_from_list)(data.get("pods", [])),
                failed_pods=frozenset(_ref_from_dict(item) for item in data.get("failedPods", [])),
                succeeded_pods=frozenset(_ref_from_dict(item) for item in data.get("succeededPods", [])),
                failed_roles={str(role): str(why) for role, why in data.get("failedRoles", {}).items()},
                job_failure=None if data.get("jobFailure") is None else str(data["jobFailure"]),
                timed_out=bool(data.get("timedOut", False)),
            )
        except (TypeError, KeyError, AttributeError) as error:
            raise ValueError(f"not a saved policy state: {error}") from None


def _ref_to_dict(ref: PodRef) -> dict[str, Any]:
    return {"role": ref.role, "index": ref.index}


def _ref_from_dict(data: Mapping[str, Any]) -> PodRef:
    return PodRef(str(data["role"]), int(data["index"]))


def pod_entry_to_dict(ref: PodRef, counters: PodCounters) -> dict[str, Any]:
    """One entry of ``PolicyState.to_dict()["pods"]``."""
    return {
        **_ref_to_dict(ref),
        "restarts": counters.restarts,
        "consecutiveHangs": counters.consecutive_hangs,
        "backoffStreak": counters.backoff_streak,
        "lastRestartAt": counters.last_restart_at,
        "runningSince": counters.running_since,
    }


def pod_entry_from_dict(data: Mapping[str, Any]) -> tuple[PodRef, PodCounters]:
    """The inverse of ``pod_entry_to_dict``."""

    def optional_float(key: str) -> float | None:
        value = data.get(key)
        return None if value is None else float(value)

    return _ref_from_dict(data), PodCounters(
        restarts=int(data.get("restarts", 0)),
        consecutive_hangs=int(data.get("consecutiveHangs", 0)),
        backoff_streak=int(data.get("backoffStreak", 0)),
        last_restart_at=optional_float("lastRestartAt"),
        running_since=optional_float("runningSince"),
    )


def pods_to_list(pods: Mapping[PodRef, PodCounters]) -> list[dict[str, Any]]:
    """``PolicyState.to_dict()["pods"]``: one entry per pod, in PodRef order."""
    return [pod_entry_to_dict(ref, pods[ref]) for ref in sorted(pods, key=REF_ORDER)]


def pods_from_list(entries: Iterable[Mapping[str, Any]]) -> dict[PodRef, PodCounters]:
    """The inverse of ``pods_to_list``."""
    return dict(map(pod_entry_from_dict, entries))


#: How the pods' counters in the saved policy state are written, and read.
PodsWriter = Callable[[Mapping[PodRef, PodCounters]], list[dict[str, Any]]]
PodsReader = Callable[[Iterable[Mapping[str, Any]]], dict[PodRef, PodCounters]]


class Outcome(str, Enum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    #: Failed because the job ran past its timeLimit/activeDeadlineSeconds.
    TIMEOUT = "Timeout"


@dataclass(frozen=True)
class JobOutcome:
    """How the job stands by its completePolicy/failPolicy; ``result`` None: it goes on."""

    result: Outcome | None
    reason: str
    #: Roles that have completed by their completePolicy.
    succeeded_roles: frozenset[str] = frozenset()
    #: Roles that have failed by their failPolicy (or by a fail-role decision).
    failed_roles: frozenset[str] = frozenset()

    @property
    def finished(self) -> bool:
        return self.result is not None
