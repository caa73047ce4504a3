"""A handle on the real-node cluster of tests/realk8s/conftest.py: kubectl, its nodes, waiting on pods."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.cluster import KubeCluster
from tests.k8s.conftest import run_script

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "scripts" / "k8s-images"
#: Where the cluster's registry listens (scripts/lib/realnodes.py): the nodes pull every image from it.
REGISTRY = "10.201.0.254:5000"
STOCK_PYTORCH = "pytorch/pytorch:latest"
NO_PYTHON = "debian:bookworm-slim"
REAL_NODE_LABEL = "trainguard.io/real-node"
#: Where the chart installs the operator, and what the tests apply.
NAMESPACE = "trainguard-system"
CHART = ROOT / "deploy" / "helm" / "trainguard"
#: The fencing wait the test clusters' operator is installed with (the chart's default is 120 s).
FENCE_SECONDS = 30.0
EXAMPLES = ROOT / "examples" / "k8s"


@dataclass(frozen=True)
class RealCluster(KubeCluster):
    node_bin: Path = Path()

    def json(self, *args: str) -> Any:
        return self.get_json(*args)

    def real_nodes(self) -> list[str]:
        nodes = self.json("get", "nodes", "-l", f"{REAL_NODE_LABEL}=true")["items"]
        return sorted(n["metadata"]["name"] for n in nodes)

    def node_ready(self, node: str) -> bool:
        conditions = self.json("get", "node", node)["status"].get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def stop_kubelet(self, node: str) -> None:
        run_script("stop-kubelet", node.rsplit("-", 1)[1], cluster=self.name)

    def start_kubelet(self, node: str) -> None:
        run_script("start-kubelet", node.rsplit("-", 1)[1], cluster=self.name)

    def stop_node(self, node: str) -> None:
        """The node dies: kubelet stopped, its pods' processes frozen, its network link down."""
        run_script("stop-node", node.rsplit("-", 1)[1], cluster=self.name)

    def start_node(self, node: str) -> None:
        run_script("start-node", node.rsplit("-", 1)[1], cluster=self.name)

    def apply(self, obj: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return self.json("get", "pod", name, "-n", namespace)  # type: ignore[no-any-return]

    def replica_pods(self, job: str) -> list[dict[str, Any]]:
        """The job's replica pods (not its rendezvous store's): those with a replica index."""
        found = self.json("get", "pods", "-l", f"trainguard.io/job={job},trainguard.io/index")["items"]
        return list(found)

    def pod_log_files(self, pod: str, namespace: str = "default") -> list[Path]:
        """The files in which the real nodes' kubelets keep the logs of the containers of pods named ``pod``
        (each pod of that name, each container, each restart), oldest first: what ``kubectl logs`` reads, for
        where it cannot (in one run it fetched nothing of a failed job's launcher on a node back from death).
        The nodes' state is beside the cluster's kubeconfig in the cache (``scripts/k8s-testcluster``)."""
        nodes = self.kubeconfig.parents[3] / "nodes" / self.name
        files = nodes.glob(f"node-*/pod-logs/{namespace}_{pod}_*/*/*.log")
        return sorted(files, key=lambda path: path.stat().st_mtime)


def wait_for(
    what: str,
    condition: Callable[[], Any],
    seconds: float,
    every: float = 1.0,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Polls condition until it returns something truthy, which it returns; fails the test past the deadline,
    with what ``explain`` says of the state then."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = f"\n{explain()}" if explain is not None else ""
            pytest.fail(f"gave up after {seconds:.0f}s waiting for {what}{seen}")
        time.sleep(every)


def helm(cluster: RealCluster, *args: str) -> str:
    """Runs the helm the test cluster built, against the cluster; fails the test with helm's stderr."""
    done = subprocess.run(
        [str(cluster.node_bin / "helm"), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def log_stamp(text: str) -> float:
    """Seconds since the epoch of kubectl's RFC 3339 timestamp ("2026-11-24T21:52:25.9162Z": nanoseconds at
    most, trailing zeros dropped)."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    seconds = datetime.fromisoformat(whole + "+00:00").timestamp()
    return seconds + float(f"0.{fraction or '0'}")
