"""What a pod and the control plane say to each other, each name spelled here once.

The control plane (the controller's launch specs, the local runtime, the operator) sets environment variables
and files for a pod; inside it the agent, the launchers (``trainguard.pod.torchrun``, ``trainguard.pod.livelaunch``)
and the SDK read them and answer through the agent's report, the worker events and the job's rendezvous store.
Both sides import their names from here: a name added or changed here is changed for all of them, and a typo is
an ``AttributeError`` at import, not a variable nobody reads.

What runs in users' images imports this module from the agent's bundle: standard library only, Python 3.8.
The records that cross the wall have modules of their own beside this one: the worker events
(``trainguard.pod.workerevents``) and the agent's summary of its pod (``trainguard.pod.summary``).
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote, unquote

# ---- the pod's identity, set by the control plane for every pod (the first seven in CCE's words) ----------

ENV_JOB_NAME = "TRAININGJOB_NAME"
ENV_JOB_NAMESPACE = "TRAININGJOB_NAMESPACE"
ENV_JOB_UID = "TRAININGJOB_UID"
ENV_REPLICA_NAME = "TRAININGJOB_REPLICA_NAME"
ENV_REPLICA_INDEX = "TRAININGJOB_REPLICA_INDEX"
ENV_REPLICA_RESTART_COUNT = "TRAININGJOB_REPLICA_RESTARTCOUNT"
ENV_POD_NAME = "TRAININGJOB_POD_NAME"
#: The pod slot's incarnation (a replacement has the next).
ENV_GENERATION = "TRAINGUARD_GENERATION"
#: The node the pod runs on (the local runtime's virtual node; the downward API's ``spec.nodeName``).
ENV_NODE_NAME = "TRAINGUARD_NODE_NAME"
#: ``role=size,...``: the job's roles and their sizes, for CCE's job barrier.
ENV_ROLE_SIZES = "TRAINGUARD_ROLE_SIZES"

# ---- torch's and torchrun's own names, as trainguard sets or clears them ----------------------------------

MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
WORLD_SIZE = "WORLD_SIZE"
RANK = "RANK"
LOCAL_RANK = "LOCAL_RANK"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
GROUP_WORLD_SIZE = "GROUP_WORLD_SIZE"
GROUP_RANK = "GROUP_RANK"
ROLE_RANK = "ROLE_RANK"
NODE_RANK = "NODE_RANK"
TORCHELASTIC_RUN_ID = "TORCHELASTIC_RUN_ID"
TORCHELASTIC_RESTART_COUNT = "TORCHELASTIC_RESTART_COUNT"
#: torchrun's options as environment variables (Kubeflow's ``PET_`` prefix: ``PET_NNODES`` is ``--nnodes``).
PET_RDZV_BACKEND = "PET_RDZV_BACKEND"
PET_RDZV_ENDPOINT = "PET_RDZV_ENDPOINT"
PET_RDZV_ID = "PET_RDZV_ID"
PET_RDZV_CONF = "PET_RDZV_CONF"
PET_NNODES = "PET_NNODES"
PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
PET_MAX_RESTARTS = "PET_MAX_RESTARTS"
#: ``1``: torchrun's agents do not share the rendezvous store with the workers (trainguard hosts it).
TORCH_DISABLE_SHARE_RDZV_TCP_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
#: A static world's variables (Kubeflow sets them in every pod): gone from a live worker's environment, so that
#: a script that does not use ``trainguard.Live`` fails to start its group at once (and the live launcher falls
#: back to torchrun's agent) instead of training alone in a world of one.
STATIC_WORLD = (RANK, GROUP_RANK, ROLE_RANK, MASTER_ADDR, MASTER_PORT, NODE_RANK)

# ---- Horovod's own names, as trainguard sets them ----------------------------------------------------------
#: horovodrun's wait for enough hosts after its cluster changed (its default 600 s): the job's scaling timeout
#: (``spec.scaling.timeoutSeconds``), given to the launcher's pod.
HOROVOD_ELASTIC_TIMEOUT = "HOROVOD_ELASTIC_TIMEOUT"

# ---- the agent: what the control plane tells it -----------------------------------------------------------

ENV_HANG_TIMEOUT = "TRAINGUARD_HANG_TIMEOUT"
ENV_HANG_MAX_CONSECUTIVE = "TRAINGUARD_HANG_MAX_CONSECUTIVE"
ENV_HANG_SIGNALS = "TRAINGUARD_HANG_SIGNALS"
ENV_HANG_GRACE = "TRAINGUARD_HANG_GRACE"
#: "1": detect hangs and report them as suspected, never stop the command (GPU jobs with hang handling off).
ENV_HANG_REPORT_ONLY = "TRAINGUARD_HANG_REPORT_ONLY"
#: The agent's report file (JSON lines; the local runtime folds it with ``trainguard.pod.summary``).
ENV_REPORT_FILE = "TRAINGUARD_REPORT_FILE"
ENV_TERMINATION_LOG = "TRAINGUARD_TERMINATION_LOG"
#: Where the agent POSTs its summary to the operator, and the file of the token it shows.
ENV_REPORT_URL = "TRAINGUARD_REPORT_URL"
ENV_REPORT_TOKEN = "TRAINGUARD_REPORT_TOKEN"
#: Fencing (``trainguard.agent.lease``): where the agent renews its lease (with the report token), and how long
#: its workers run on without a renewal.
ENV_LEASE_URL = "TRAINGUARD_LEASE_URL"
ENV_FENCE_AFTER = "TRAINGUARD_FENCE_AFTER"
#: A file the control plane writes to end the pod with an exit code (CCE's job barrier, ``trainguard chaos``).
ENV_CONTROL_FILE = "TRAINGUARD_CONTROL_FILE"
#: ``<token> <unix time>``: a peer failed, restart the workers (the controller's ``NudgeSurvivors``).
ENV_NUDGE_FILE = "TRAINGUARD_NUDGE_FILE"
#: ``<token> <address>...``: a Horovod host was lost, shut the survivors' connections to it down.
ENV_RELEASE_FILE = "TRAINGUARD_RELEASE_FILE"
#: The fault tolerance check's settings, JSON (``trainguard.pod.checks.Settings``); unset: no checks.
ENV_FAULT_CHECK = "TRAINGUARD_FAULT_CHECK"
#: A test aid: a directory holding, per node name, the check items that read as faulty on that node
#: (``trainguard chaos hardware-fault``); the agent finds its node in ``ENV_NODE_NAME``.
ENV_FAULT_INJECT = "TRAINGUARD_FAULT_INJECT"

#: The prefix of trainguard's own variables: only its own parts read them (the agent, the launchers, the SDK).
OWN_PREFIX = "TRAINGUARD_"


def carried_by_agent(name: str) -> bool:
    """Whether the operator gives variable ``name`` of a launch to the pod's agent (``--env NAME=VALUE``), which
    sets it for the command it starts, instead of putting it into the container's ``env``: trainguard's own
    variables, and torchrun's switch that only its launcher under the agent reads. The pod stays as small as
    the API server and the nodes can handle quickly; what users' scripts read (``TRAININGJOB_*``, ``MASTER_*``,
    ``RANK``, ``PET_*``) stays in ``env``, where ``kubectl describe`` and a shell in the container see it."""
    return name.startswith(OWN_PREFIX) or name == TORCH_DISABLE_SHARE_RDZV_TCP_STORE


# ---- the agent: what it tells the command -----------------------------------------------------------------

#: Where the SDK's ``heartbeat()`` writes, and which start of the command this is (1, 2, ...).
ENV_HEARTBEAT_DIR = "TRAINGUARD_HEARTBEAT_DIR"
ENV_ATTEMPT = "TRAINGUARD_ATTEMPT"
#: The file the launchers and the SDK append worker events to (``trainguard.pod.workerevents``).
ENV_WORKER_EVENTS = "TRAINGUARD_WORKER_EVENTS"
#: In that directory, ``trainguard.heartbeat`` replaces ``rank-<rank>.json`` for each rank (``heartbeat_file``).
HEARTBEAT_PREFIX = "rank-"
HEARTBEAT_SUFFIX = ".json"


def heartbeat_file(rank: int) -> str:
    """A rank's heartbeat file's name, in the agent's heartbeat directory."""
    return f"{HEARTBEAT_PREFIX}{rank}{HEARTBEAT_SUFFIX}"


# ---- the launchers ----------------------------------------------------------------------------------------

#: ``host:port`` of the job's rendezvous store.
ENV_RDZV_ENDPOINT = "TRAINGUARD_RDZV_ENDPOINT"
#: How often a waiting torchrun agent polls the rendezvous, in seconds (set from the job's size).
ENV_RDZV_POLL_SECONDS = "TRAINGUARD_RDZV_POLL_SECONDS"
#: Modules ``trainguard.pod.torchrun``'s fork server imports once, for every worker (comma-separated).
ENV_PRELOAD = "TRAINGUARD_PRELOAD"

# ---- live mode (``trainguard.Live`` and its launcher) -----------------------------------------------------

#: The first round's size (the job's replicas times the processes per pod), and the fewest members a later
#: round may have (the job's minimum).
ENV_LIVE_SIZE = "TRAINGUARD_LIVE_SIZE"
ENV_LIVE_MINIMUM = "TRAINGUARD_LIVE_MINIMUM"
#: ``host:port`` of the store rounds form on (default: the job's rendezvous store).
ENV_LIVE_STORE = "TRAINGUARD_LIVE_STORE"
#: The job's keys' prefix in that store (``live_prefix``).
ENV_LIVE_PREFIX = "TRAINGUARD_LIVE_PREFIX"
#: The bound of one collective, in seconds.
ENV_LIVE_TIMEOUT = "TRAINGUARD_LIVE_TIMEOUT"
#: A directory where the launcher looks for ``<pid>``: that worker formed a round (it uses ``Live``).
ENV_LIVE_MARK = "TRAINGUARD_LIVE_MARK"
#: ... and ``<pid>`` with this suffix: that spare is warm and waits to be called.
SPARE_READY_SUFFIX = ".spare-ready"
#: ``1``: each step of forming a round is printed to stderr.
ENV_LIVE_TRACE = "TRAINGUARD_LIVE_TRACE"
#: How many connections a state transfer uses side by side.
ENV_LIVE_STREAMS = "TRAINGUARD_LIVE_STREAMS"
#: Hot spares: how many spare workers the live launcher keeps in each pod beside its ``--nproc-per-node``.
ENV_LIVE_SPARES = "TRAINGUARD_LIVE_SPARES"
#: A spare worker's end of the pipe its launcher calls it through (a file descriptor): the spare warms up,
#: then waits on it, holding no rank, until the launcher writes a line (it takes a failed worker's place) or
#: closes it (the pod's work is done).
ENV_LIVE_SPARE_FD = "TRAINGUARD_LIVE_SPARE_FD"

# ---- the SDK's state in the pod ---------------------------------------------------------------------------

#: The pod's shared memory for ``trainguard.Snapshots`` (outlives the process, not the pod).
ENV_SNAPSHOT_DIR = "TRAINGUARD_SNAPSHOT_DIR"
#: The address peers reach this pod's snapshot server at.
ENV_SNAPSHOT_HOST = "TRAINGUARD_SNAPSHOT_HOST"
#: Where ``trainguard.elasticity`` keeps a worker's state between restarts.
ENV_STATE_DIR = "TRAINGUARD_STATE_DIR"

# ---- the agent's report: one JSON line per event (``trainguard.agent.report``), folded by ``trainguard.pod.summary``

REPORT_STARTED = "started"
REPORT_PROGRESS = "progress"
REPORT_HANG = "hang"
REPORT_RESTART_IN_PLACE = "restart-in-place"
REPORT_WORKERS_RESTARTED = "workers-restarted"
REPORT_LIVE_REFORMED = "live-reformed"
REPORT_LIVE_UNUSED = "live-unused"
REPORT_NUDGED = "nudged"
#: The agent shut down this pod's connections to a lost peer (``trainguard.agent.release``).
REPORT_RELEASED = "released"
#: One fault tolerance check of the pod's node (``trainguard.pod.checks.CheckResult``, under ``check``).
REPORT_CHECKED = "checked"
#: Each rank's own work per step (``trainguard.agent.rankwork``), under ``ranks``: rank, steps, busySeconds.
REPORT_RANKS = "ranks"
REPORT_EXITED = "exited"
#: The agent's final report when it gave up on a hang (past its restarts in a row), with ``REASON_HANG``.
REPORT_GAVE_UP = "gave-up"
REASON_HANG = "Hang"
#: The agent ended its workers itself: it could not confirm that its pod is still its slot's current
#: incarnation (``trainguard.agent.lease``); with ``exit_code`` ``EXIT_FENCED``.
REASON_FENCED = "Fenced"
EXIT_FENCED = 75
#: Report-only detection (``--report-only``): a hang suspected (``signal``, ``idle_seconds``), once per episode,
#: and its end when progress resumed.
REPORT_SUSPECTED_HANG = "suspected-hang"
#: A live pod's hot spares: ``ready`` of ``wanted``.
REPORT_SPARES = "spares"
REPORT_SUSPICION_CLEARED = "suspicion-cleared"

# ---- live mode and NCCL's error handling ------------------------------------------------------------------

#: NCCL's error handling in torch (its older name is read too), and the mode live mode needs: clean up only (a
#: failed or timed-out collective aborts its communicator and raises in the training thread; the process lives).
NCCL_ERROR_HANDLING = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING")
NCCL_CLEAN_UP_ONLY = "2"
#: The modes that end a survivor's process on a peer's fault: tear down (torch's default), skip clean-up.
NCCL_KILLS_SURVIVORS = frozenset({"1", "3"})


def nccl_refusal(env: Mapping[str, str]) -> str | None:
    """Why ``env``'s NCCL error handling would end the survivors of a fault in live mode; None where it would
    not (unset, or a mode that keeps the process)."""
    for name in NCCL_ERROR_HANDLING:
        value = str(env.get(name, "")).strip()
        if value in NCCL_KILLS_SURVIVORS:
            return (
                f"{name}={value} makes NCCL end every process whose collective fails, so a fault would end the "
                f"survivors too; remove it (trainguard sets {NCCL_ERROR_HANDLING[0]}={NCCL_CLEAN_UP_ONLY} for "
                f"live jobs) or set {NCCL_CLEAN_UP_ONLY}"
            )
    return None


# ---- the live rounds' keys in the job's store -------------------------------------------------------------


def live_prefix(run_id: str) -> str:
    """The job's keys in the store: one prefix per rendezvous id (the job's uid)."""
    return f"trainguard/live/{run_id}/"


@dataclass(frozen=True)
class Member:
    """A live worker's incarnation, as its rounds name it (``id``, the same string in the launcher and the SDK).

    ``pod`` and ``generation``: the pod's name and incarnation (``TRAININGJOB_POD_NAME``,
    ``TRAINGUARD_GENERATION``; outside trainguard the host name and 0). ``pid`` and ``started``: the process and
    when it started (clock ticks since the machine's boot, ``/proc/<pid>/stat``; 0 where there is no ``/proc``),
    so that a pid used again is another member. ``space``: the pid namespace the pid is counted in (``pid_space``;
    "" unknown): pods on the host's network share its host name, each with pids of its own.
    """

    pod: str
    generation: int
    pid: int
    started: int
    space: str

    @property
    def id(self) -> str:
        fields = (quote(self.pod, safe=""), str(self.generation), str(self.pid), str(self.started))
        return "/".join((*fields, self.space or _NO_SPACE))

    @classmethod
    def parse(cls, text: str) -> Member:
        """The member ``id`` names; a ``ValueError`` for any other string."""
        parts = text.split("/")
        if len(parts) != 5 or not all(p.isdigit() for p in parts[1:4]) or not parts[0]:
            raise ValueError(f"not a live member's id: {text!r} (pod/generation/pid/started/space)")
        pod, generation, pid, started, space = parts
        return cls(unquote(pod), int(generation), int(pid), int(started), "" if space == _NO_SPACE else space)

    @classmethod
    def of(cls, pid: int | None = None, environ: Mapping[str, str] | None = None) -> Member:
        """Process ``pid`` (default: this one) of this pod, whose environment is ``environ`` (default: this
        process's; a launcher's workers inherit its pod's names). ``pid`` must be in this pid namespace and not
        yet reaped."""
        environ = os.environ if environ is None else environ
        pid = os.getpid() if pid is None else pid
        generation = environ.get(ENV_GENERATION, "")
        return cls(
            pod=environ.get(ENV_POD_NAME) or socket.gethostname(),
            generation=int(generation) if generation.isdigit() else 0,
            pid=pid,
            started=process_started(pid) or 0,
            space=pid_space(),
        )


_NO_SPACE = "-"


def member_id(pid: int | None = None, environ: Mapping[str, str] | None = None) -> str:
    """A live worker's name in its rounds (``Member.id``; default: this process)."""
    return Member.of(pid, environ).id


def process_started(pid: int) -> int | None:
    """When process ``pid`` of this namespace started, in clock ticks since boot; None when there is none (or
    no ``/proc``). A zombie still has its start until it is reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    # Field 22; the name (field 2) is in parentheses and may hold spaces and parentheses itself.
    fields = text[text.rindex(b")") + 2 :].split()
    return int(fields[19])


@lru_cache(maxsize=1)
def pid_space() -> str:
    """This process's pid namespace, the same for every process that shares it and no other: the machine's
    boot and the namespace's inode, hashed (""  where there is no ``/proc``)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            where = boot.read().strip() + os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return hashlib.sha256(where.encode()).hexdigest()[:16]


class LiveKeys:
    """The keys of one job's live rounds, under its prefix."""

    #: The round most recently closed.
    LATEST = "latest"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def gone(self, member: str) -> str:
        """Set by a member's launcher (or the member itself) when its process has ended: no round waits for it."""
        return f"{self.prefix}gone/{member}"

    def finished(self, member: str) -> str:
        """Set by a member whose run ended (the step it ended at): the rest of its round end theirs, not a fault."""
        return f"{self.prefix}finished/{member}"

    def beat(self, member: str) -> str:
        """A counter the member's watchdog adds to while it lives."""
        return f"{self.prefix}beat/{member}"

    def latest(self) -> str:
        return self.prefix + self.LATEST

    def arrivals(self, round: int) -> str:
        """The number of members that arrived in ``round``."""
        return f"{self.prefix}r{round}/arrivals"

    def arrival(self, round: int, index: int) -> str:
        """The ``index``-th arrival in ``round``: its member and the step its state is at (JSON)."""
        return f"{self.prefix}r{round}/m{index}"

    def closed(self, round: int) -> str:
        """The round's membership once it closed (JSON)."""
        return f"{self.prefix}r{round}/closed"

    def group(self, round: int, again: int = 0) -> str:
        """The prefix of the round's process group's keys (``again``: a group made anew in the same round, its
        members in another order: a sharded state's, each member in the slot of the shard it holds)."""
        return f"{self.prefix}r{round}/pg/" if not again else f"{self.prefix}r{round}/pg-{again}/"

    def transfer(self, round: int) -> str:
        """The prefix of the round's state transfer's keys."""
        return f"{self.prefix}r{round}/xfer/"

    def skeleton(self, round: int) -> str:
        """The state's layout, sent once per round to the newcomers."""
        return f"{self.prefix}r{round}/skeleton"

    def step(self, round: int) -> str:
        """The step the round's state is at, set by its first sender."""
        return f"{self.prefix}r{round}/step"
