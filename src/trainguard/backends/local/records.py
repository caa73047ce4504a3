"""Rows of the local store, as frozen dataclasses. Each carries the version it was read at."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class PodState(str, Enum):
    """Where a local pod's process stands, as the backend tracks it."""

    #: Launch accepted, but no Ready node has a free slot: waits for one.
    PENDING = "Pending"
    #: The launch was decided and written down; the process may or may not exist yet (crash window).
    LAUNCHING = "Launching"
    RUNNING = "Running"
    #: The process ended; exit code (or signal) recorded.
    EXITED = "Exited"
    #: We asked it to stop; it is being (or has been) stopped.
    TERMINATING = "Terminating"
    #: Gone without an exit we could read (killed with its node, vanished).
    LOST = "Lost"
    #: Removed (asked for, or force-deleted); kept as a tombstone so an old launch is never redone.
    DELETED = "Deleted"


@dataclass(frozen=True)
class JobRecord:
    name: str
    uid: str
    spec: dict[str, Any]
    spec_version: int
    status: dict[str, Any]
    status_version: int
    created_at: float
    port: int
    nodes_wanted: int | None = None
    #: Where relative paths of the job resolve: the directory ``trainguard run`` was called from.
    workdir: str = "."
    deleted: bool = False


@dataclass(frozen=True)
class PodRecord:
    name: str
    job: str
    role: str
    index: int
    node: str
    state: PodState
    #: How many times this pod slot was launched; each launch has its own report file.
    launch: int = 1
    restarts: int = 0
    pid: int | None = None
    create_time: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    deleted_by_us: bool = False
    #: Hang restarts in place the controller has decided for this launch (the agent carries them out).
    in_place_acked: int = 0
    #: When a graceful stop turns into SIGKILL (epoch seconds).
    stop_deadline: float | None = None
    #: Nodes this launch must not use (the pod lost its previous node).
    avoid: tuple[str, ...] = ()
    #: Set by chaos: the fault to report for this launch (force-deleted, evicted, an exit code).
    injected: dict[str, Any] = field(default_factory=dict)
    #: What this launch runs: the controller's ``LaunchSpec.to_dict()``, as its row holds it (JSON). Read as
    #: ``launch_spec`` where a launch starts, and nowhere else: a pass reads every pod's row, and decoding
    #: each one's spec was most of the time a deletion of a large job took (``benchmarks/local_reconcile.py``).
    launch_spec_json: str = "{}"
    version: int = 0

    @property
    def launch_spec(self) -> dict[str, Any]:
        """What this launch runs, decoded (``LaunchSpec.from_dict`` takes it)."""
        return json.loads(self.launch_spec_json)  # type: ignore[no-any-return]

    @property
    def alive(self) -> bool:
        """A process of this pod may exist."""
        return self.state in (PodState.LAUNCHING, PodState.RUNNING, PodState.TERMINATING)

    @property
    def holds_slot(self) -> bool:
        return self.alive


@dataclass(frozen=True)
class NodeRecord:
    name: str
    slots: int
    ready: bool = True
    version: int = 0
    #: Why a fault tolerance check isolated the node ('' where it is not isolated): no pod is placed there.
    isolated: str = ""


@dataclass(frozen=True)
class EventRecord:
    job: str
    at: float
    type: str
    reason: str
    object: str
    message: str
    id: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "time": self.at,
            "type": self.type,
            "reason": self.reason,
            "object": self.object,
            "message": self.message,
        }
