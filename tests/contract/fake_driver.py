"""The contract driver for the controller's in-memory fake cluster (``tests/fake_cluster.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.fake_cluster import FakeCluster
from trainguard.api import TrainingJob
from trainguard.controller import JobStatus, step

from .driver import View

#: Seconds of fake time per reconcile.
TICK = 0.5


class FakeDriver:
    name = "fake"

    def __init__(self, nodes: int = 7) -> None:
        self.cluster = FakeCluster.with_nodes(nodes, start_seconds=1.0)
        self.status = JobStatus()
        self.job: TrainingJob | None = None

    def submit(self, job: dict[str, Any]) -> None:
        data = {**job, "metadata": {**job["metadata"], "uid": "contract-uid"}}
        self.job = TrainingJob.model_validate(data)
        self._tick()

    def _tick(self) -> None:
        assert self.job is not None
        self.cluster.progress()
        self.status = step(self.cluster, self.job, self.status, self.cluster.now).status
        self.cluster.advance(TICK)

    def view(self) -> View:
        nudged = {pod: nudge.token for nudge in self.cluster.nudges for pod in nudge.pods}
        return {"status": self.status.to_dict(), "nudged": nudged}

    def wait(self, condition: Callable[[View], bool], what: str, timeout: float = 30) -> View:
        for _ in range(int(timeout / TICK)):
            view = self.view()
            if condition(view):
                return view
            self._tick()
        raise AssertionError(
            f"{self.name}: not {what} after {timeout} s of fake time: {self.view()['status']['phase']}"
        )

    def exit(self, pod: str, code: int) -> None:
        self.cluster.exit(pod, code)

    def node_down(self, node: str) -> None:
        self.cluster.node_down(node)

    def node_up(self, node: str) -> None:
        self.cluster.node_up(node)

    def force_delete(self, pod: str) -> None:
        self.cluster.force_delete(pod)

    def evict(self, pod: str) -> None:
        self.cluster.evict(pod)

    def scale(self, role: str, replicas: int) -> None:
        self.cluster.scale(role, replicas)

    def close(self) -> None:
        pass
