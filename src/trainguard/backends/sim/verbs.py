"""The simulator's hands (``trainguard.controller.apply``): the verbs the one applier calls on a ``SimCluster``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from trainguard.controller import (
    Action,
    ActionError,
    EmitEvent,
    LaunchPod,
    NudgeSurvivors,
    ReleaseSurvivors,
    RestartInPlace,
    TerminatePod,
    UpdateDiscovery,
    WriteStatus,
)
from trainguard.controller.apply import in_order

if TYPE_CHECKING:
    from trainguard.backends.sim.cluster import SimCluster, SimPod


class Refused(Exception):
    """The simulated cluster cannot carry the action out (recorded under its key)."""


class SimVerbs:
    """The simulator's hands for one batch (``trainguard.controller.apply``): the pods it launches are placed
    together at its end, so that they start together."""

    failures: tuple[type[Exception], ...] = (Refused,)

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.launched: list[SimPod] = []

    def now(self) -> float:
        return self.cluster.now

    def keep_error(self, error: ActionError) -> None:
        self.cluster.errors.append(error)
        self.cluster.changed()

    @contextmanager
    def batch(self, actions: Sequence[Action]) -> Iterator[None]:
        yield
        self.cluster.place(self.launched)

    def before_launches(self) -> None:
        pass

    side_by_side = staticmethod(in_order)

    def launch(self, action: LaunchPod) -> None:
        self.launched.append(self.cluster.launch_pod(action))

    def terminate(self, action: TerminatePod) -> None:
        self.cluster.terminate_pod(action)

    def restart_in_place(self, action: RestartInPlace) -> None:
        self.cluster.restart_pod_in_place(action)

    def nudge(self, action: NudgeSurvivors) -> None:
        self.cluster.nudges.append(action)  # simulated pods have no workers: what was asked is kept

    def release(self, action: ReleaseSurvivors) -> None:
        self.cluster.releases.append(action)  # simulated pods have no connections: what was asked is kept

    def update_discovery(self, action: UpdateDiscovery) -> None:
        self.cluster.discovery = action.hosts

    def emit_event(self, action: EmitEvent) -> None:
        self.cluster.events_total += 1
        self.cluster.recent_events.append(action)

    def write_status(self, action: WriteStatus) -> None:
        self.cluster.write_status(action)
