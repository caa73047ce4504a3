"""What the agent's loop and its watchers share: the tick each poll hands them, what may end a run of the
command, and the watcher's interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from trainguard.agent.detector import Hang
from trainguard.pod.checks import CheckResult


@dataclass(frozen=True)
class Tick:
    """One poll of the agent's loop."""

    now: float
    #: The command's process (None before it started).
    pid: int | None
    #: Which start of the command this is (1, 2, ...).
    attempt: int


@dataclass(frozen=True)
class Hung:
    """The command hung: stop it, and restart it in place while the streak allows."""

    hang: Hang
    best_step: int | None


@dataclass(frozen=True)
class ExitRequested:
    """The runtime asked for the pod to end with this exit code."""

    exit_code: int


@dataclass(frozen=True)
class NodeFaulty:
    """A periodic fault tolerance check found the node's hardware faulty: stop the command, end the pod."""

    result: CheckResult


@dataclass(frozen=True)
class Fenced:
    """The agent cannot confirm that its pod is still its slot's current incarnation: kill the tree, end the pod
    (``trainguard.agent.lease``)."""

    reason: str


class Watcher(Protocol):
    def start(self, now: float) -> None:
        """The command (re)started: what this watcher keeps per run starts again."""

    def poll(self, tick: Tick) -> Hung | ExitRequested | NodeFaulty | Fenced | None:
        """Look at the channel once; an outcome ends this run of the command."""
