"""CCE's AITrainingJob example in native form, and a harness that drives reconcile against the fake cluster."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fake_cluster import FakeCluster
from trainguard.api import TrainingJob
from trainguard.controller import JobPhase, JobStatus, ReconcileResult, reconcile


def cce_spec(**job_overrides: Any) -> dict[str, Any]:
    """CCE's example (test-horovod-elastic): a launcher and 3 trainers (1..5), its fault policies."""
    common = {
        "restartLimit": 100,
        "restartPolicy": "OnNodeFailWithExitCode",
        "restartScope": "Pod",
        "restartTimeLimit": 60,
        "restartTimeout": 864000,
    }
    spec: dict[str, Any] = {
        "cleanPodPolicy": "None",
        "completePolicy": "Any",
        "failPolicy": "Any",
        "frameworkType": "horovod",
        "replicaSpecs": {
            "launcher": {
                **common,
                "completePolicy": "All",
                "failPolicy": "Any",
                "faultTolerantPolicy": [
                    {"exitCodes": "129,101", "restartPolicy": "ExitCode", "restartScope": "Pod"},
                    {
                        "exceptionalEvent": "nodeNotReady",
                        "restartPolicy": "OnNodeFail",
                        "restartScope": "Pod",
                    },
                ],
                "maxReplicas": 1,
                "minReplicas": 1,
                "replicaType": "master",
                "replicas": 1,
            },
            "trainer": {
                **common,
                "completePolicy": "None",
                "failPolicy": "None",
                "faultTolerantPolicy": [
                    {
                        "exceptionalEvent": "nodeNotReady,PodForceDeleted",
                        "restartPolicy": "OnNodeFail",
                        "restartScope": "Pod",
                    },
                ],
                "maxReplicas": 5,
                "minReplicas": 1,
                "replicaType": "worker",
                "replicas": 3,
            },
        },
    }
    spec.update(job_overrides)
    return spec


def make_job(spec: dict[str, Any] | None = None, name: str = "test-horovod-elastic") -> TrainingJob:
    return TrainingJob.model_validate(
        {"metadata": {"name": name, "namespace": "default", "uid": "uid-1"}, "spec": spec or cce_spec()}
    )


def with_role(spec: dict[str, Any], role: str, **changes: Any) -> dict[str, Any]:
    roles = {**spec["replicaSpecs"], role: {**spec["replicaSpecs"][role], **changes}}
    return {**spec, "replicaSpecs": roles}


@dataclass
class Harness:
    """Observe, reconcile, apply, move the clock: a controller on a fake cluster."""

    job: TrainingJob
    cluster: FakeCluster
    status: JobStatus = field(default_factory=JobStatus)
    results: list[ReconcileResult] = field(default_factory=list)

    @classmethod
    def start(cls, job: TrainingJob | None = None, nodes: int = 6, **cluster: Any) -> Harness:
        return cls(job or make_job(), FakeCluster.with_nodes(nodes, **cluster))

    def step(self) -> ReconcileResult:
        self.cluster.progress()
        result = reconcile(self.job, self.status, self.cluster.observe(self.job), self.cluster.now)
        self.cluster.apply(self.job, result.actions)
        self.status = result.status
        self.results.append(result)
        return result

    def tick(self, seconds: float = 1.0) -> ReconcileResult:
        result = self.step()
        self.cluster.advance(seconds)
        return result

    def run_until(self, done: Callable[[Harness], bool], *, limit: int = 200, seconds: float = 1.0) -> None:
        """Tick until ``done`` holds; fails the test after ``limit`` ticks (a deadline, never a sleep)."""
        for _ in range(limit):
            self.step()
            if done(self):
                return
            self.cluster.advance(seconds)
        raise AssertionError(f"not done after {limit} ticks; phase {self.status.phase.value}")

    def running(self) -> None:
        self.run_until(lambda h: h.status.phase is JobPhase.RUNNING)

    def pod(self, name: str) -> Any:
        return next(p for p in self.status.pods if p.name == name)


def worker_job(workers: int = 2, job: dict[str, Any] | None = None, **worker: Any) -> TrainingJob:
    """A job with one master and ``workers`` workers; ``worker`` changes the worker role's fields."""
    master = {"replicas": 1, "restartPolicy": "OnFailure", "completePolicy": "All", "failPolicy": "Any"}
    spec: dict[str, Any] = {
        "replicaSpecs": {
            "master": master,
            "worker": {"replicas": workers, "restartPolicy": "OnFailure", "completePolicy": "None", **worker},
        },
        "cleanPodPolicy": "All",
        "completePolicy": "Any",
        **(job or {}),
    }
    return make_job(spec, name="job")
