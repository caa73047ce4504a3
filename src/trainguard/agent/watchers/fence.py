"""Fencing: the command ends once the agent cannot confirm its pod is still current (``trainguard.agent.lease``)."""

from __future__ import annotations

from trainguard.agent.lease import Lease
from trainguard.agent.watchers.base import Fenced, Tick


class FenceWatcher:
    def __init__(self, lease: Lease) -> None:
        self.lease = lease

    def start(self, now: float) -> None:
        pass

    def poll(self, tick: Tick) -> Fenced | None:
        reason = self.lease.fenced(tick.now)
        return Fenced(reason) if reason is not None else None
