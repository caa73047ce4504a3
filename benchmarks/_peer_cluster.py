"""The kwok cluster of ``k8s_peers.py`` and what the benchmark writes to it: the cluster brought up and taken
down, each run's nodes made fresh, an operator's CRDs installed, and the namespace cleaned after a run."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _kwok import kwok_node
from _peers import HOLD_FINALIZER, NAMESPACE

from trainguard.backends.k8s.client import ApiError, Kube

ROOT = Path(__file__).resolve().parents[1]

Obj = dict[str, Any]
CLUSTER = "peers"
GROUP = "peers"
SCRIPTS = ROOT / "scripts"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
PYTORCHJOBS = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs"
VCJOBS = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs"


def say(text: str) -> None:
    print(f"k8s_peers: {text}", file=sys.stderr, flush=True)


def wait_for(
    what: str, done: Callable[[], bool], timeout: float, progress: Callable[[], str], poll: float = 0.05
) -> float | None:
    """Seconds until ``done()``, or None after ``timeout``; progress every 30 s on stderr. ``done`` is asked
    every ``poll`` seconds (the figures' resolution), or less often where one look takes more than a fifth of
    that: the benchmark's own looks stay a small part of a machine it shares with what it measures."""
    started = last = time.monotonic()
    while True:
        looked = time.monotonic()
        if done():
            return time.monotonic() - started
        now = time.monotonic()
        if now - started >= timeout:
            say(f"{what}: not within {timeout:g} s ({progress()})")
            return None
        if now - last >= 30:
            last = now
            say(f"{what}: {now - started:4.0f} s, {progress()}")
        time.sleep(max(poll, 5 * (now - looked)))


def cluster_up() -> str:
    env = {**os.environ, "TRAINGUARD_K8S_CLUSTER": CLUSTER}
    script = SCRIPTS / "k8s-testcluster"
    out = subprocess.run([str(script), "up"], env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
    return out.strip().removeprefix("export KUBECONFIG=")


def cluster_down() -> None:
    env = {**os.environ, "TRAINGUARD_K8S_CLUSTER": CLUSTER}
    subprocess.run([str(SCRIPTS / "k8s-testcluster"), "down"], env=env, check=False)


def in_parallel(action: Callable[[Any], Any], items: list[Any]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(action, items))


def create(kube: Kube, path: str, body: Obj) -> None:
    try:
        kube.create(path, body)
    except ApiError as error:
        if error.status != 409:
            raise


def delete(kube: Kube, path: str, grace: int | None = None, uid: str | None = None) -> None:
    """Deleted, if it is there; with ``uid``, only that incarnation (a pod of the same name that its operator
    created since is another one, and is left alone)."""
    try:
        kube.delete(path, grace=grace, uid=uid)
    except ApiError as error:
        if error.status != 404 and not (uid is not None and error.status == 409):
            raise


def gone(kube: Kube, path: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kube.get(path)
        except ApiError as error:
            if error.status == 404:
                return
            raise
        time.sleep(0.5)
    raise SystemExit(f"{path} still there after {timeout:g} s")


NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def fresh_nodes(kube: Kube, names: list[str], pods_per_node: int) -> None:
    """The benchmark's nodes, new and Ready (earlier ones, with their taints and faults, deleted first)."""
    listed = kube.list("/api/v1/nodes", labelSelector=f"trainguard.io/test-nodes={GROUP}")["items"]
    in_parallel(lambda n: delete(kube, f"/api/v1/nodes/{n['metadata']['name']}"), listed)
    for node in listed:
        gone(kube, f"/api/v1/nodes/{node['metadata']['name']}")
    # Their Leases too: kwok acts on a node's pods only once it holds the node's Lease, and a Lease left by a
    # deleted node of the same name is not taken over before it expires (the first run of each round had fresh
    # names, the others waited ~45 s for their pods to run). New nodes have new names as well (see run_one).
    in_parallel(lambda n: delete(kube, f"{NODE_LEASES}/{n['metadata']['name']}"), listed)
    # They say what the test cluster's real nodes say of their kubelet and runtime: an operator that reads it (as
    # trainguard's does, to mount its agent as an image volume) reads what it would on those nodes.
    in_parallel(
        lambda n: create(kube, "/api/v1/nodes", kwok_node(n, pods_per_node, group=GROUP, like_real=True)),
        names,
    )

    def ready() -> bool:
        items = kube.list("/api/v1/nodes", labelSelector=f"trainguard.io/test-nodes={GROUP}")["items"]
        ready_ones = {
            n["metadata"]["name"]
            for n in items
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        }
        held = {lease["metadata"]["name"] for lease in kube.list(NODE_LEASES)["items"]}
        return set(names) <= ready_ones & held

    if wait_for("nodes Ready, their Leases held by kwok", ready, 120, lambda: "") is None:
        raise SystemExit("the nodes did not become Ready")


def release_held(kube: Kube) -> None:
    """Every pod that still carries the benchmark's finalizer, let go."""
    for pod in kube.list(PODS)["items"]:
        if HOLD_FINALIZER in (pod["metadata"].get("finalizers") or []):
            with contextlib.suppress(ApiError):
                kube.patch(f"{PODS}/{pod['metadata']['name']}", without_hold(pod))


def without_hold(pod: Obj) -> Obj:
    kept = [f for f in pod["metadata"].get("finalizers") or [] if f != HOLD_FINALIZER]
    return {"metadata": {"finalizers": kept or None}}


def clean(kube: Kube, crds: list[Obj]) -> None:
    """No job, pod, Service, ConfigMap or Secret of a job left in the namespace, and the operator's CRDs gone."""
    release_held(kube)
    for crd in crds:
        delete(kube, f"{CRDS}/{crd['metadata']['name']}")
    pods = kube.list(PODS)["items"]
    in_parallel(lambda p: delete(kube, f"{PODS}/{p['metadata']['name']}", grace=0), pods)
    for kind in ("services", "configmaps", "secrets"):
        path = f"/api/v1/namespaces/{NAMESPACE}/{kind}"
        # (kube-root-ca.crt is the namespace's own.)
        paths = [f"{path}/{o['metadata']['name']}" for o in kube.list(path)["items"]]
        in_parallel(
            lambda path: delete(kube, path), [p for p in paths if not p.endswith("/kube-root-ca.crt")]
        )
    for crd in crds:
        gone(kube, f"{CRDS}/{crd['metadata']['name']}")
    deadline = time.monotonic() + 120
    while kube.list(PODS)["items"]:
        if time.monotonic() > deadline:
            raise SystemExit("pods still there after the clean-up")
        time.sleep(0.5)


def install_crds(kube: Kube, crds: list[Obj]) -> None:
    for crd in crds:
        create(kube, CRDS, crd)
    for crd in crds:
        name = crd["metadata"]["name"]

        def established(name: str = name) -> bool:
            conditions = (kube.get(f"{CRDS}/{name}").get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        if wait_for(f"CRD {name} established", established, 60, lambda: "") is None:
            raise SystemExit(f"CRD {name} was not established")
