"""A real Kubernetes control plane for the tests: kube-apiserver, etcd, scheduler, controller-manager, and kwok
simulating nodes and pod lifecycles. It comes from scripts/k8s-testcluster, the same script a person runs.

Each pytest session gets its own cluster (named after the session's pid, so that sessions side by side do
not share one) and stops it at the end. Clusters left by sessions that were killed are stopped on the next
run. The binaries are built once per version (a cold build takes long); that happens after collection, so a
test's timeout never covers it. TRAINGUARD_SKIP_K8S=1 skips these tests.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.k8s.cluster import KubeCluster

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "k8s-testcluster"
SESSION_PREFIX = "pytest-"
SKIP_REASON = "TRAINGUARD_SKIP_K8S=1: Kubernetes test cluster tests skipped"


def k8s_skipped() -> bool:
    return os.environ.get("TRAINGUARD_SKIP_K8S") == "1"


def run_script(*args: str, cluster: str | None = None) -> str:
    env = dict(os.environ)
    if cluster is not None:
        env["TRAINGUARD_K8S_CLUSTER"] = cluster
    # stderr is the script's progress; it reaches the terminal when capture is off (-s) or in a failure.
    done = subprocess.run([str(SCRIPT), *args], env=env, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"{SCRIPT.name} {' '.join(args)} failed with exit code {done.returncode}")
    return done.stdout


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_abandoned_clusters() -> None:
    """Stops the clusters of earlier sessions whose pytest process is gone (killed before its teardown)."""
    for name in run_script("list").split():
        pid = name.removeprefix(SESSION_PREFIX)
        if name.startswith(SESSION_PREFIX) and pid.isdigit() and not pid_alive(int(pid)):
            run_script("down", cluster=name)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Builds the binaries before any test runs when a collected test needs the cluster."""
    if k8s_skipped() or not any("kube_cluster" in getattr(i, "fixturenames", ()) for i in session.items):
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")
    # A cold build takes long: let its progress lines through to the terminal.
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        built = subprocess.run([str(SCRIPT), "build"], stdout=subprocess.DEVNULL, check=False)
    if built.returncode != 0:
        pytest.exit(f"{SCRIPT} build failed (exit code {built.returncode}); see its output above", 1)


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    if k8s_skipped():
        pytest.skip(SKIP_REASON)
    stop_abandoned_clusters()
    yield from _cluster(f"{SESSION_PREFIX}{os.getpid()}")


@pytest.fixture(scope="module")
def own_kube_cluster(kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    """A cluster of the module's own, for a test whose load (a thousand nodes and their pods, being deleted for
    minutes afterwards) would slow the shared one's API server for the tests after it."""
    yield from _cluster(f"{kube_cluster.name}-own")


def _cluster(name: str) -> Iterator[KubeCluster]:
    bin_dir = Path(run_script("build").strip())
    prefix = "export KUBECONFIG="
    try:  # a cluster that fails half way up is stopped too
        exported = run_script("up", cluster=name).strip()
        if not exported.startswith(prefix):
            pytest.fail(f"{SCRIPT.name} up printed {exported!r}, expected {prefix}...")
        yield KubeCluster(name=name, kubeconfig=Path(exported.removeprefix(prefix)), bin_dir=bin_dir)
    finally:
        run_script("down", cluster=name)
