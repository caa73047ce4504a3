"""The fault tolerance check's isolation at scale on the kwok test cluster: 1,000 nodes, 50 of them bad, 100 jobs
of 8 pods (one pod fits a node). kwok runs no agent, so the test plays every pod's agent: a pod that runs on a
bad node ends as its agent ends it after a failed pre-check (exit 120, reason HardwareFault, its summary's
failedCheck of phase ``pre``). The operator isolates each bad node a pod failed on and issues the pod again.

Asserted: no job pod is created on, or bound to, a node after that node's isolation was seen; only bad nodes
are isolated; isolations stay within the cluster's bound (10 % of the nodes) and each job's (3); every job
runs, its pods off the bad nodes; 10 jobs submitted afterwards never touch an isolated node.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from benchmarks._kwok import kwok_node

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import scenario
from tests.k8s.test_node_isolation import fail_pre_check, job
from trainguard.backends.k8s import isolation
from trainguard.backends.k8s.client import ApiError

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(1500)]

Obj = dict[str, Any]
NODES = 1000
BAD = 50
JOBS = 100
LATER_JOBS = 10
PODS = 8
CLUSTER_BOUND = NODES // 10
JOB_BOUND = 3


def _time(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


class Agents:
    """Plays the agents of the namespace's pods and keeps what the test asserts: each pod incarnation's node
    and times, and when each node was first seen isolated."""

    def __init__(self, api: Any, namespace: str, bad: set[str], scenario_: Any) -> None:
        self.api = api
        self.namespace = namespace
        self.bad = bad
        self.scenario = scenario_
        self.failed: set[str] = set()
        #: uid -> (pod, node, created, scheduled)
        self.seen: dict[str, tuple[str, str, float, float | None]] = {}
        #: node -> wall time it was first seen isolated
        self.isolated_at: dict[str, float] = {}
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.look()
            except Exception as error:  # kept for the test to report, never lost in a thread
                self.errors.append(repr(error))
            self.stop.wait(1.0)

    def look(self) -> None:
        now = time.time()
        nodes = self.api.list("/api/v1/nodes", labelSelector=isolation.KEY)["items"]
        for node in nodes:
            if isolation.is_isolated(node):
                self.isolated_at.setdefault(node["metadata"]["name"], now)
        pods = self.api.list(f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        for pod in pods:
            meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
            node = spec.get("nodeName")
            if not node:
                continue
            scheduled = next(
                (
                    c.get("lastTransitionTime")
                    for c in status.get("conditions") or []
                    if c["type"] == "PodScheduled"
                ),
                None,
            )
            self.seen.setdefault(
                meta["uid"], (meta["name"], node, _time(meta["creationTimestamp"]) or 0.0, _time(scheduled))
            )
            if (
                node in self.bad
                and status.get("phase") == "Running"
                and meta["uid"] not in self.failed
                and not meta.get("deletionTimestamp")
            ):
                self.failed.add(meta["uid"])
                try:
                    fail_pre_check(self.scenario, meta["name"])
                except BaseException as error:  # pytest.fail from kubectl: a pod deleted meanwhile
                    self.failed.discard(meta["uid"])
                    self.errors.append(f"{meta['name']}: {error!r}")

    def violations(self) -> list[str]:
        """Pods created on, or bound to, a node more than a second after it was seen isolated."""
        found = []
        for name, node, created, scheduled in self.seen.values():
            since = self.isolated_at.get(node)
            if since is None:
                continue
            if created > since + 1 or (scheduled is not None and scheduled > since + 1):
                found.append(
                    f"{name} on {node}: created {created:.0f}, bound {scheduled}, isolated {since:.0f}"
                )
        return found


def _create_nodes(api: Any, names: list[str], group: str) -> None:
    def create(name: str) -> None:
        try:
            api.create("/api/v1/nodes", kwok_node(name, 1, group=group))
        except ApiError as error:
            if error.status != 409:
                raise

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, names))


def _wait(what: str, check: Callable[[], Any], timeout: float, log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            tail = log.read_text()[-3000:] if log.exists() else ""
            pytest.fail(f"not {what} within {timeout:g} s; operator log tail:\n{tail}")
        time.sleep(2)


def test_a_thousand_nodes_fifty_bad_no_pod_lands_on_an_isolated_node_and_the_bounds_hold(
    own_kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    # A cluster of its own: deleting its thousand nodes and their pods keeps an API server busy for minutes.
    kube_cluster = own_kube_cluster
    api = kube_cluster.api()
    with scenario(kube_cluster, tmp_path, nodes=0) as s:
        names = [f"{s.namespace}-n{i:04d}" for i in range(NODES)]
        bad = set(random.Random(46).sample(names, BAD))
        _create_nodes(api, names, s.namespace)

        def ready() -> bool:
            listed = api.list("/api/v1/nodes", labelSelector=f"trainguard.io/test-nodes={s.namespace}")[
                "items"
            ]
            return sum(
                1
                for n in listed
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n["status"].get("conditions") or []
                )
            ) == len(names)

        _wait(f"{NODES} nodes Ready", ready, 300, s.operator.log)
        agents = Agents(api, s.namespace, bad, s)
        agents.thread.start()
        try:
            path = f"/apis/trainguard.io/v1/namespaces/{s.namespace}/trainingjobs"
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda i: api.create(path, job(f"job-{i:03d}", PODS)), range(JOBS)))

            def settled(count: int) -> list[Obj] | None:
                jobs = api.list(path)["items"]
                done = [j for j in jobs if (j.get("status") or {}).get("phase") in ("Running", "Failed")]
                if len(done) < count:
                    return None
                running = {
                    p["metadata"]["name"]: p["spec"].get("nodeName")
                    for p in api.list(f"/api/v1/namespaces/{s.namespace}/pods")["items"]
                    if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                }
                wanted = sum(PODS for j in jobs if j["status"].get("phase") == "Running")
                if len(running) < wanted or set(running.values()) & bad:
                    return None
                return jobs

            jobs = _wait(f"{JOBS} jobs settled off the bad nodes", lambda: settled(JOBS), 900, s.operator.log)
            first_isolated = dict(agents.isolated_at)

            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda i: api.create(path, job(f"later-{i:02d}", PODS)), range(LATER_JOBS)))
            jobs = _wait("the later jobs settled", lambda: settled(JOBS + LATER_JOBS), 300, s.operator.log)
            agents.look()
        finally:
            agents.stop.set()
            agents.thread.join(timeout=30)

        isolated = {
            n["metadata"]["name"] for n in api.list("/api/v1/nodes", labelSelector=isolation.KEY)["items"]
        }
        assert not agents.errors, agents.errors[:5]
        assert agents.violations() == []
        assert isolated <= bad  # nothing isolated that should not be
        assert len(isolated) <= CLUSTER_BOUND
        hit = {node for _, node, _, _ in agents.seen.values() if node in bad}
        assert hit == isolated  # every bad node a pod failed on, and only those
        assert len(isolated) >= BAD // 2  # the test did what it says: many bad nodes met
        for j in jobs:
            status = j["status"]
            mine = (status.get("faultCheck") or {}).get("isolated") or []
            assert len(mine) <= JOB_BOUND
            if status["phase"] == "Failed":  # only a bound on isolations may fail a job, and it says so
                assert "isolat" in json.dumps(status.get("conditions")), status.get("conditions")
        later = {uid: seen for uid, seen in agents.seen.items() if seen[0].startswith("later-")}
        assert later
        assert not {node for _, node, _, _ in later.values()} & set(first_isolated)
        print(
            f"{len(isolated)} of {BAD} bad nodes isolated; {len(agents.failed)} pods failed their pre-check; "
            f"{len(agents.seen)} pod incarnations seen"
        )
