"""The contract driver for the simulator: its cluster and event loop (``trainguard.backends.sim``), with
faults seen at once and the virtual clock moved in small steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.sim import Engine, SimCluster, Timing, VirtualClock
from trainguard.backends.sim.jobs import worker_role
from trainguard.backends.sim.pods import GPU_POOL

from .driver import View

#: Seconds of virtual time between looks at the job.
TICK = 0.5


class SimDriver:
    name = "sim"

    def __init__(self, nodes: int = 7) -> None:
        self.cluster = SimCluster.build(VirtualClock(), {GPU_POOL: nodes}, start_seconds=1.0)
        self.engine: Engine | None = None

    def submit(self, job: dict[str, Any]) -> None:
        data = {**job, "metadata": {**job["metadata"], "uid": "contract-uid"}}
        model = TrainingJob.model_validate(data)
        timing = Timing(checkpoint_cost=0.0, restart_cost=0.0, batch=0.0)
        self.engine = Engine(model, self.cluster, timing, worker_role(model))
        self.engine.start()

    @property
    def _engine(self) -> Engine:
        assert self.engine is not None, "submit a job first"
        return self.engine

    def view(self) -> View:
        nudged = {pod: nudge.token for nudge in self.cluster.nudges for pod in nudge.pods}
        return {"status": self._engine.status.to_dict(), "nudged": nudged}

    def wait(self, condition: Callable[[View], bool], what: str, timeout: float = 30) -> View:
        deadline = self.cluster.now + timeout
        while True:
            view = self.view()
            if condition(view):
                return view
            if self.cluster.now >= deadline:
                raise AssertionError(
                    f"{self.name}: not {what} after {timeout} s of virtual time: {view['status']['phase']}"
                )
            self._engine.run_until(self.cluster.now + TICK)

    def exit(self, pod: str, code: int) -> None:
        self._engine.exit_pod(pod, code)

    def node_down(self, node: str) -> None:
        self._engine.node_down(node)

    def node_up(self, node: str) -> None:
        self._engine.node_up(node)

    def force_delete(self, pod: str) -> None:
        self._engine.force_delete(pod)

    def evict(self, pod: str) -> None:
        self._engine.evict_pod(pod)

    def scale(self, role: str, replicas: int) -> None:
        self._engine.scale(role, replicas)

    def close(self) -> None:
        pass
