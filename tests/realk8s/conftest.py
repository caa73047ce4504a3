"""A Kubernetes cluster with real nodes for the tests: the control plane of tests/k8s, plus two real nodes
(kubelet, containerd, kube-proxy each; CoreDNS; an image registry), all from scripts/k8s-testcluster
`up --real-nodes 2`, the command a person runs, with the images of scripts/k8s-images pushed to its registry.

Real nodes need root (network namespaces, cgroups, mounts): without it these tests are skipped, saying so.
One real-node cluster runs at a time (its addresses are fixed); each session stops the one a killed session
left. The binaries and images are built once (cached) before any test runs, so no test's timeout covers a
cold build. TRAINGUARD_SKIP_K8S=1 skips these tests too.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.conftest import SCRIPT, SKIP_REASON, k8s_skipped, run_script
from tests.realk8s.real import CHART, FENCE_SECONDS, IMAGES, NAMESPACE, REGISTRY, RealCluster, helm

CLUSTER = "pytest-real"


def needs_root() -> str | None:
    return None if os.geteuid() == 0 else "real nodes need root (network namespaces, cgroups, mounts)"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Builds the real nodes' binaries and the images before any test runs, when a test needs them."""
    if k8s_skipped() or needs_root():
        return
    if not any("real_cluster" in getattr(i, "fixturenames", ()) for i in session.items):
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")
    started = time.monotonic()
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        for argv in ([str(SCRIPT), "build", "--real-nodes"], [str(IMAGES), "build"]):
            built = subprocess.run(argv, stdout=subprocess.DEVNULL, check=False)
            if built.returncode != 0:
                pytest.exit(
                    f"{' '.join(argv)} failed (exit code {built.returncode}); see its output above", 1
                )
        took = round(time.monotonic() - started)
        print(f"== the real nodes' builds (cached after the first run) took {took}s", flush=True)
    # scripts/test adds this to the total of its set-up steps.
    if os.environ.get("TRAINGUARD_BUILD_SECONDS_FILE"):
        Path(os.environ["TRAINGUARD_BUILD_SECONDS_FILE"]).write_text(f"{took}\n")


def pytest_runtest_logfinish(nodeid: str) -> None:
    """Tells scripts/test that CCE's Horovod job is done (its file, TRAINGUARD_CCE_DONE_FILE): the other lane holds
    its training tests until then, so that the job's recovery is timed beside unit tests, not beside a dozen
    PyTorch workers (on a fresh machine the builds of this lane push the job that late)."""
    if nodeid.startswith("tests/realk8s/test_cce_horovod.py::") and os.environ.get(
        "TRAINGUARD_CCE_DONE_FILE"
    ):
        Path(os.environ["TRAINGUARD_CCE_DONE_FILE"]).touch()


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[RealCluster]:
    if k8s_skipped():
        pytest.skip(SKIP_REASON)
    reason = needs_root()
    if reason:
        pytest.skip(reason)
    node_bin, bin_dir = (Path(line) for line in run_script("build", "--real-nodes").split())
    run_script("down", cluster=CLUSTER)  # left by a session that was killed
    prefix = "export KUBECONFIG="
    try:
        exported = run_script("up", "--real-nodes", "2", cluster=CLUSTER).strip()
        if not exported.startswith(prefix):
            pytest.fail(f"k8s-testcluster up printed {exported!r}, expected {prefix}...")
        pushed = subprocess.run([str(IMAGES), "push", REGISTRY], stdout=subprocess.DEVNULL, check=False)
        if pushed.returncode != 0:
            pytest.fail(f"{IMAGES.name} push {REGISTRY} failed with exit code {pushed.returncode}")
        yield RealCluster(
            name=CLUSTER, kubeconfig=Path(exported.removeprefix(prefix)), bin_dir=bin_dir, node_bin=node_bin
        )
    finally:
        run_script("down", cluster=CLUSTER)


@pytest.fixture(scope="session")
def operator(real_cluster: RealCluster) -> Iterator[RealCluster]:
    """The operator installed as users install it: the chart with its defaults (and PyTorchJobs served, and a
    shorter fencing wait than the chart's 120 s, ``FENCE_SECONDS``: a lost node's pods are replaced that much
    later in every test that loses one), from the operator's image in the cluster's registry; uninstalled at
    the end."""
    helm(real_cluster, "install", "trainguard", str(CHART), "-n", NAMESPACE, "--create-namespace",
         "--set", "pytorchjobs=true", "--set", f"fencing.seconds={FENCE_SECONDS:g}",
         "--wait", "--timeout", "600s")  # fmt: skip
    try:
        yield real_cluster
    finally:
        helm(real_cluster, "uninstall", "trainguard", "-n", NAMESPACE, "--wait", "--timeout", "120s")
