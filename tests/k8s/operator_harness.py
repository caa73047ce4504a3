"""Running the operator against the test cluster: CRDs installed, kwok nodes, the operator in a subprocess
(so that a test can kill it like a crashed pod), and waiting on the job's status with deadlines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from benchmarks._kwok import exit_code_patch, node_list, not_ready_patch

from tests.k8s.cluster import KubeCluster

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "deploy" / "crds"
TRAINGUARD = Path(sys.executable).parent / "trainguard"

Obj = dict[str, Any]


def install_crds(cluster: KubeCluster) -> None:
    cluster.kubectl("apply", "-f", str(CRDS))
    for crd in ("trainingjobs.trainguard.io", "aitrainingjobs.kongming.cce.baiudbce.com"):
        cluster.wait_established(crd)


class OperatorProcess:
    """``trainguard operator`` for one namespace, started and killed at will."""

    def __init__(
        self, cluster: KubeCluster, namespace: str, log: Path, kubeconfig: Path | None = None
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.log = log
        #: The operator's own credentials (the cluster's admin kubeconfig unless given).
        self.kubeconfig = kubeconfig or cluster.kubeconfig
        self.lease_namespace: str | None = None
        #: Serve Prometheus metrics on this loopback port (None: off).
        self.metrics_port: int | None = None
        #: More ``trainguard operator`` options (e.g. ``--pytorchjobs``).
        self.extra_args: list[str] = []
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, identity: str = "") -> None:
        argv = [
            str(TRAINGUARD),
            "operator",
            "--namespace",
            self.namespace,
            "--kubeconfig",
            str(self.kubeconfig),
            "--scheduler-name",
            "default-scheduler",
        ]
        if identity:
            argv += ["--id", identity]
        if self.lease_namespace:
            argv += ["--lease-namespace", self.lease_namespace]
        if self.metrics_port is not None:
            argv += ["--metrics-port", str(self.metrics_port)]
        argv += self.extra_args
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """SIGKILL, like a crashed operator pod: no clean-up, the Lease is not released."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None


class Scenario:
    """One test's namespace, nodes and operator."""

    def __init__(
        self,
        cluster: KubeCluster,
        tmp: Path,
        nodes: int = 6,
        namespace: str | None = None,
        operator_id: str = "",
        kubeconfig: Path | None = None,
        lease_namespace: str | None = None,
    ) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.cluster = cluster
        self.namespace = namespace or f"tg-{suffix}"
        self.own_namespace = namespace is None
        self.nodes = [f"tg-{suffix}-node-{i}" for i in range(nodes)]
        self.operator = OperatorProcess(cluster, self.namespace, tmp / "operator.log", kubeconfig)
        self.operator.lease_namespace = lease_namespace
        self.operator_id = operator_id

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.cluster.kubectl("-n", self.namespace, *args, input=input)

    def set_up(self) -> None:
        install_crds(self.cluster)
        if self.own_namespace:
            self.cluster.kubectl("create", "namespace", self.namespace)
        self.add_nodes(self.nodes)
        self.operator.start(identity=self.operator_id)

    def add_nodes(self, names: list[str]) -> None:
        if not names:  # a test that makes its own (a thousand, through the API)
            return
        self.cluster.kubectl("apply", "-f", "-", input=node_list(names, group=self.namespace))
        for name in names:
            self.cluster.kubectl("wait", "--for=condition=Ready", f"node/{name}", "--timeout=60s")

    def tear_down(self) -> None:
        self.operator.stop()
        if self.own_namespace:
            self.cluster.kubectl("delete", "namespace", self.namespace, "--wait=false")
        else:
            # The next test may use the same job name: its pods must be gone first.
            for resource in ("aitrainingjobs", "trainingjobs"):
                self.kubectl("delete", resource, "--all")
            self.kubectl("delete", "pods", "-l", "trainguard.io/job", "--grace-period=0", "--force")
            self.kubectl("delete", "events", "--all")
        self.cluster.kubectl(
            "delete", "nodes", "-l", f"trainguard.io/test-nodes={self.namespace}", "--wait=false"
        )

    # ---- reading ----------------------------------------------------------------------------------

    def job(self, resource: str, name: str) -> Obj:
        return self.cluster.get_json("get", f"{resource}/{name}", "-n", self.namespace)

    def pods(self) -> list[Obj]:
        return list(self.cluster.get_json("get", "pods", "-n", self.namespace)["items"])

    def wait(self, what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
        """``check()``'s first truthy result; fails naming ``what`` past the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                log = self.operator.log.read_text()[-3000:] if self.operator.log.exists() else ""
                pytest.fail(f"not {what} within {timeout:g} s; operator log tail:\n{log}")
            time.sleep(0.3)

    def wait_job(
        self, resource: str, name: str, what: str, test: Callable[[Obj], bool], timeout: float = 60
    ) -> Obj:
        def check() -> Obj | None:
            job = self.job(resource, name)
            return job if job.get("status") and test(job["status"]) else None

        result: Obj = self.wait(what, check, timeout)
        return result

    # ---- faults -----------------------------------------------------------------------------------

    def exit_pod(self, pod: str, code: int) -> None:
        """kwok's chaos Stage ends the pod's container with ``code`` (it acts on pods with its label)."""
        self.kubectl("patch", "pod", pod, "--type=merge", "-p", json.dumps(exit_code_patch(code)))

    def node_down(self, node: str) -> None:
        self.cluster.kubectl("patch", "node", node, "--type=merge", "-p", json.dumps(not_ready_patch()))

    def force_delete(self, pod: str) -> None:
        self.kubectl("delete", "pod", pod, "--grace-period=0", "--force", "--wait=false")

    def evict(self, pod: str) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": self.namespace},
        }
        self.cluster.kubectl(
            "create",
            "--raw",
            f"/api/v1/namespaces/{self.namespace}/pods/{pod}/eviction",
            "-f",
            "-",
            input=json.dumps(body),
        )


@contextmanager
def slow_ready(cluster: KubeCluster, name: str, labels: dict[str, str], delay_ms: int) -> Iterator[None]:
    """A kwok Stage that makes the pods with ``labels`` Ready only ``delay_ms`` after they are scheduled,
    instead of at once: it is kwok's own pod-ready Stage (its status template, read from the cluster) with
    a label selector, a delay, and a weight that wins over the original for those pods. Removed afterwards.
    """
    stage = json.loads(cluster.kubectl("get", "stage", "pod-ready", "-o", "json"))
    spec = stage["spec"]
    spec["selector"]["matchExpressions"] = [
        *({"key": f'.metadata.labels["{k}"]', "operator": "In", "values": [v]} for k, v in labels.items()),
        *spec["selector"]["matchExpressions"],
    ]
    spec["delay"] = {"durationMilliseconds": delay_ms}
    spec["weight"] = 10000
    body = {"apiVersion": stage["apiVersion"], "kind": "Stage", "metadata": {"name": name}, "spec": spec}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
    try:
        yield
    finally:
        cluster.kubectl("delete", "stage", name, "--ignore-not-found")


@contextmanager
def scenario(
    cluster: KubeCluster,
    tmp: Path,
    nodes: int = 6,
    namespace: str | None = None,
    operator_id: str = "",
    kubeconfig: Path | None = None,
    lease_namespace: str | None = None,
) -> Iterator[Scenario]:
    chosen = Scenario(cluster, tmp, nodes, namespace, operator_id, kubeconfig, lease_namespace)
    chosen.set_up()
    try:
        yield chosen
    finally:
        chosen.tear_down()


def pod_names(pods: list[Obj], alive_only: bool = True) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in pods
        if not alive_only
        or (not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running")
    )


def environment_ok() -> bool:
    return TRAINGUARD.exists() and os.access(TRAINGUARD, os.X_OK)
