"""The contract driver for the Kubernetes operator: the job as a TrainingJob resource in its own namespace of
the test cluster, the operator in a subprocess, faults through kwok's chaos Stages and the API."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import Scenario
from trainguard.backends.k8s.manifests import ANNOTATION_NUDGE

from .driver import View

#: Kubernetes needs an image; kwok never pulls it.
IMAGE = "example.invalid/trainer:1"


class KubeDriver:
    name = "k8s"

    def __init__(self, cluster: KubeCluster, tmp: Path, nodes: int = 7) -> None:
        self.scenario = Scenario(cluster, tmp, nodes)
        self.scenario.set_up()
        self.job_name = ""

    def submit(self, job: dict[str, Any]) -> None:
        data = copy.deepcopy(job)
        data["metadata"] = {**data["metadata"], "namespace": self.scenario.namespace}
        for spec in data["spec"]["replicaSpecs"].values():
            for container in spec["template"]["spec"]["containers"]:
                container.setdefault("image", IMAGE)
        self.job_name = data["metadata"]["name"]
        self.scenario.kubectl("apply", "-f", "-", input=json.dumps(data))

    def view(self) -> View:
        job = self.scenario.job("trainingjob", self.job_name)
        # What the operator carried out: the nudge annotation (``<token> <time>``) on each survivor.
        nudged = {
            pod["metadata"]["name"]: value.split(" ")[0]
            for pod in self.scenario.pods()
            if (value := (pod["metadata"].get("annotations") or {}).get(ANNOTATION_NUDGE))
        }
        return {"status": job.get("status") or {"phase": "", "pods": [], "history": []}, "nudged": nudged}

    def wait(self, condition: Callable[[View], bool], what: str, timeout: float = 30) -> View:
        deadline = time.monotonic() + max(timeout, 60)  # a real control plane: seconds, not fake ticks
        while True:
            view = self.view()
            try:
                if view["status"].get("phase") and condition(view):
                    return view
            except (KeyError, StopIteration):
                pass  # not far enough yet to be judged
            if time.monotonic() > deadline:
                raise AssertionError(f"k8s: not {what}: {view['status'].get('phase')}")
            time.sleep(0.3)

    def exit(self, pod: str, code: int) -> None:
        self.scenario.exit_pod(pod, code)

    def node_down(self, node: str) -> None:
        self.scenario.node_down(node)

    def node_up(self, node: str) -> None:
        self.scenario.cluster.kubectl("label", "node", node, "node-not-ready.stage.kwok.x-k8s.io-")

    def force_delete(self, pod: str) -> None:
        self.scenario.force_delete(pod)

    def evict(self, pod: str) -> None:
        self.scenario.evict(pod)

    def scale(self, role: str, replicas: int) -> None:
        patch = {"spec": {"replicaSpecs": {role: {"replicas": replicas}}}}
        self.scenario.kubectl("patch", "trainingjob", self.job_name, "--type=merge", "-p", json.dumps(patch))

    def close(self) -> None:
        self.scenario.tear_down()
