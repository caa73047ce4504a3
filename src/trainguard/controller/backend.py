"""The one interface between the controller and a place that runs pods (processes, Kubernetes, a simulator).

A backend does two things:

``observe(job) -> Observed``
    What is there now for one job: its pods (each with the generation it was launched as, its phase, node,
    exit code, reason and the latest report of its agent), the nodes, the scale requests users made, and
    the errors of actions it could not carry out. Observing changes nothing: no pod is created, signalled
    or removed while looking (a pod stuck terminating, a launch that must wait are the controller's to
    decide, by actions, like everything else).

``apply(actions) -> Applied``
    Start carrying out actions. It is **asynchronous** (effects show up in a later ``observe()``),
    **eventually consistent** (a pod launched a moment ago may not be listed yet) and **idempotent by
    key**: an action whose ``key`` the backend has already accepted is ignored, so the controller may send
    the same action again — after a crash, or when it reconciles the same observation twice — and nothing
    happens twice. Every backend applies through the one applier (``trainguard.controller.apply``), which
    holds the rules below; a backend supplies only its verbs (launch a pod, remove one, write the status...).

The rules (``trainguard.controller.apply``):

- The actions are carried out in the order given. A batch that acts on new decisions starts with a
  ``WriteStatus`` holding those decisions, and every batch ends with one holding the keys it issued: a
  controller that crashes in between finds its decisions stored (so it never mistakes a pod it removed for
  one that vanished) and issues again, under the same keys, whatever it had not recorded as issued. A batch
  of events alone is stored once, after them: they change nothing observed, so the same status and
  observation decide them again under the same keys. So is a batch of launches that the stored status
  already decides (a new job's pods, a scale-out's, a stored restart's next incarnation) and their events:
  the same status and spec decide them again, and the backend finds the pods launched.
- ``apply`` never raises for an action that fails: the failure is recorded under the action's key, in
  ``Observed.errors``, and the controller decides what to do with it next time. A failure marked
  ``transient`` (the backend raised ``NotYet``: the action must wait for something, such as the previous
  incarnation of a pod to be gone) is not a fault: the controller issues the same intent again, under a new
  key, once what it waited for is gone.
- **A conflicting status write stops the batch.** A ``WriteStatus`` that meets a newer stored status (another
  writer since the status was read) is refused (the backend raises ``StatusConflict``); the conflict is
  recorded under its key, no action after it is carried out (they were decided from a status that is no
  longer the stored one), and ``apply`` returns ``Applied(conflict=True)``: the driver reads the stored
  status again and decides again at once.

Pods are named ``<job>-<role>-<index>`` on every backend (``trainguard.api.pod_name``); a relaunch keeps the
name and bumps the ``generation``, which the backend stores with the pod (a label on Kubernetes) and
reports back, so the controller can tell the current incarnation from one it already replaced.

A pod is one job's by the job's identity (its uid on Kubernetes, its row on the local runtime), never by its
name: ``observe`` of job ``train`` lists none of the pods of job ``train-big`` (nor what it remembers of them),
and no action of one job touches another job's pod, not even one of the same name (``train`` with a role
``big-worker`` and ``train-big`` with a role ``worker`` both name ``train-big-worker-0``): such a launch fails,
with its error in ``Observed.errors``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Protocol, TypeAlias

from trainguard.api import TrainingJob
from trainguard.controller.launchspec import LaunchSpec, Network
from trainguard.controller.reports import AgentReport
from trainguard.policy.fencing import Fencing

if TYPE_CHECKING:
    from trainguard.controller.status import JobStatus


class ObservedPhase(str, Enum):
    """The phase of a pod as a backend reports it (the Kubernetes pod phases)."""

    PENDING = "Pending"  # not started: without a node it waits for scheduling, with one it is creating
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class ObservedPod:
    name: str
    role: str
    index: int
    generation: int
    phase: ObservedPhase
    node: str | None = None
    exit_code: int | None = None
    #: Killed by this signal (a backend that knows only the code reports 128+N as ``exit_code``).
    signal: int | None = None
    #: The backend's reason: "OOMKilled", "Evicted", "Preempted", "DisruptionTarget", ...
    reason: str | None = None
    #: When the container started running (the controller's clock), if it did.
    started_at: float | None = None
    #: Deletion was asked for and is under way.
    terminating: bool = False
    #: Deletion was asked for and its grace period has passed, and the pod is still there (a backend whose
    #: kubelet enforces the grace period itself, as Kubernetes', never reports it).
    overdue: bool = False
    agent: AgentReport | None = None
    #: The pod's network address (its IP on Kubernetes), if it has one of its own.
    address: str | None = None
    #: The pod is ready for its peers to reach (Kubernetes: its Ready condition, which a Horovod host's sshd
    #: decides, ``backends.k8s.ssh.readiness_probe``); a backend without readiness reports True.
    ready: bool = True
    #: The agent cannot run in this pod's image (why, e.g. "the image has no python3"): its command runs as
    #: written, without hang detection or restart in place.
    agent_missing: str | None = None


@dataclass(frozen=True)
class ObservedNode:
    name: str
    ready: bool = True
    #: Pods the node can still take; None when the backend cannot tell.
    free_slots: int | None = None


@dataclass(frozen=True)
class ScaleRequest:
    """A user asked for ``replicas`` pods of ``role`` (CLI ``scale``, an edit of the resource, metrics)."""

    id: str
    role: str
    replicas: int
    at: float


@dataclass(frozen=True)
class ActionError:
    """An action the backend accepted but could not carry out."""

    key: str
    message: str
    at: float
    #: It could not be carried out *yet* (``NotYet``): the controller issues the intent again, no fault.
    transient: bool = False


class StatusConflict(Exception):
    """A ``WriteStatus`` met a newer stored status (another writer): read it again and decide again."""


class NotYet(Exception):
    """An action that has to wait for something still there (the previous incarnation of its pod, on its way
    out): recorded as a transient error; the controller issues the intent again once that is gone."""


@dataclass(frozen=True)
class Applied:
    """What ``apply`` reports back to its driver."""

    #: A status write met a newer stored status, and the rest of the batch was not carried out.
    conflict: bool = False


class ReleaseMode(str, Enum):
    """Whether a backend can release the survivors of a lost peer (``ReleaseSurvivors``)."""

    #: It can, and does.
    ON = "on"
    #: It could, but it is turned off (the operator's ``--no-release-survivors``): the job's history says so.
    OFF = "off"
    #: It cannot (the local runtime's pods share one address): nothing is released or recorded.
    NONE = "none"


class IsolationMode(str, Enum):
    """Whose fault tolerance checks may isolate a node (docs/faultcheck.md, "Trust"; the operator's
    ``--isolation-mode``): a job's pods' own (``AGENTS``); only the node checker's (``NODE_CHECKER``,
    ``trainguard.policy.nodechecks``: a job's hardware finding issues its pod again and isolates nothing); none."""

    AGENTS = "agents"
    NODE_CHECKER = "node-checker"
    OFF = "off"


@dataclass(frozen=True)
class Observed:
    pods: tuple[ObservedPod, ...] = ()
    nodes: tuple[ObservedNode, ...] = ()
    scale_requests: tuple[ScaleRequest, ...] = ()
    errors: tuple[ActionError, ...] = ()
    #: Where the job's pods find each other on this backend (what launches are given).
    network: Network = field(default_factory=Network)
    release: ReleaseMode = ReleaseMode.NONE
    #: The cluster's nodes, all of them (0: as many as ``nodes`` lists), and those isolated by fault
    #: tolerance checks (any job's): what bounds the isolations (``policy.faultcheck.isolation``).
    node_count: int = 0
    isolated_nodes: frozenset[str] = frozenset()
    #: Whose checks may isolate nodes here: a job's (its pods' agents'), only the node checker's, or none.
    isolation: IsolationMode = IsolationMode.AGENTS
    #: Whether pods this backend loses may run on unseen (a NotReady node's kubelet cut off), and so how long
    #: a replacement waits for the old incarnation's agent to end its workers (``policy.fencing``); None: the
    #: backend sees every pod end (the local runtime, the simulator).
    fencing: Fencing | None = None


# ---- actions ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchPod:
    """Create incarnation ``generation`` of the pod; the previous one is already gone."""

    key: str
    pod: str
    role: str
    index: int
    generation: int
    #: The pod's RESTARTS so far (``TRAININGJOB_REPLICA_RESTARTCOUNT``).
    restart_count: int
    reason: str
    #: What the pod runs: command, environment, rank and world (``launchspec``); the backend renders it.
    spec: LaunchSpec
    #: Nodes the pod must not be placed on (it failed there because of the node).
    avoid_nodes: tuple[str, ...] = ()
    #: Issued again after a failed fault tolerance check: ahead of the queue where the backend has one (the
    #: operator's priority class for it).
    first_in_line: bool = False


@dataclass(frozen=True)
class TerminatePod:
    """Stop incarnation ``generation`` of the pod and remove it (SIGTERM, grace, SIGKILL); ``force``: at once.

    Also the removal of a pod stuck terminating (its node is not Ready, so no kubelet confirms its end; or
    its grace period is over and it is still there): ``force`` then, under its own key."""

    key: str
    pod: str
    generation: int
    reason: str
    #: Remove it at once, without grace (its node is gone, so nothing can stop it gracefully).
    force: bool = False


@dataclass(frozen=True)
class RestartInPlace:
    """Stop the pod's process and run the same command again in the same pod (hang recovery)."""

    key: str
    pod: str
    generation: int
    #: The agent's ``in_place_restarts`` once this restart is done.
    attempt: int
    reason: str


@dataclass(frozen=True)
class UpdateDiscovery:
    """Rewrite the Horovod host-discovery file: one ``host:slots`` line per live worker pod."""

    key: str
    version: int
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class NudgeSurvivors:
    """Restart the workers of ``pods`` that started before ``failed_at`` (when ``failed_pod`` failed), so that
    they leave the torchrun round it was in (``trainguard.controller.nudges`` says why and when).

    Every backend hands ``token`` and the time to each pod's agent, which SIGKILLs those workers inside the
    pod (``trainguard.agent.nudge``): the operator through an annotation the agent reads from a downwardAPI
    file, the local runtime through a file in the pod's directory. Nothing of it lives in the control plane."""

    key: str
    failed_pod: str
    #: Names the failure: ``<pod>#<history seq>``.
    token: str
    failed_at: float
    pods: tuple[str, ...]


@dataclass(frozen=True)
class ReleaseSurvivors:
    """Close the connections of the processes of ``pods`` to ``addresses``, where ``lost_pod`` was, so that
    they stop waiting on a peer that will never answer (``trainguard.controller.release`` says why and when).

    Every backend that can hands ``token`` and the addresses to each pod's agent, which shuts those sockets
    down inside the pod (``trainguard.agent.release``): the operator through an annotation the agent reads
    from a downwardAPI file. No process is killed or restarted."""

    key: str
    lost_pod: str
    #: Names the loss: ``<pod>#<history seq>``.
    token: str
    addresses: tuple[str, ...]
    pods: tuple[str, ...]
    #: The other hosts that stay, and the addresses of theirs: in those pods, the connections to one another
    #: but ssh's are closed too (the previous round's: at once where a pod is still in the lost host's round,
    #: so that the hosts leave it together; those a peer that reset by itself leaves open, which a survivor
    #: may still wait on, once quiet). Not in the launcher's: its connections to them are horovodrun's own.
    hosts: tuple[str, ...] = ()
    peers: tuple[str, ...] = ()


@dataclass(frozen=True)
class IsolateNode:
    """Keep every job's pods off ``node``: its fault tolerance check, run in ``pod`` of the job, found its
    hardware faulty (``trainguard.policy.faultcheck``). The operator taints and labels the Node (NoSchedule)
    and records a Node Event naming the job, the pod and the item; the local runtime flags its virtual node;
    the simulator cordons it. A node stays isolated until someone releases it."""

    key: str
    node: str
    pod: str
    #: The item that failed, the value it read and its threshold.
    item: str
    value: float | None
    threshold: float | None
    reason: str


class EventType(str, Enum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True)
class EmitEvent:
    key: str
    type: EventType
    reason: str
    message: str
    at: float
    pod: str | None = None


@dataclass(frozen=True)
class WriteStatus:
    """Store the job's status (``status.revision`` grows by one with every write)."""

    key: str
    status: JobStatus


Action: TypeAlias = (
    LaunchPod
    | TerminatePod
    | RestartInPlace
    | NudgeSurvivors
    | ReleaseSurvivors
    | UpdateDiscovery
    | IsolateNode
    | EmitEvent
    | WriteStatus
)


class Backend(Protocol):
    """See the module's docstring: the whole contract is there."""

    def observe(self, job: TrainingJob) -> Observed: ...

    def apply(self, job: TrainingJob, actions: Sequence[Action]) -> Applied: ...
