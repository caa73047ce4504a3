"""deploy/operator's RBAC is enough, and no more: the operator runs with a ServiceAccount token bound to the
ClusterRole and leader-election Role from deploy/operator/rbac.yaml (applied unchanged), and CCE's example job
runs, scales out and in, and has a trainer replaced without one request refused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import ROOT, pod_names, scenario

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

OPERATOR_DEPLOY = ROOT / "deploy" / "operator"
CCE_JOB = ROOT / "examples" / "jobs" / "cce-horovod-elastic.yaml"
SYSTEM = "trainguard-system"
ACCOUNT = "trainguard-operator"
JOB = "test-horovod-elastic"
LAUNCHER = f"{JOB}-launcher-0"
TRAINERS = [f"{JOB}-trainer-{i}" for i in range(3)]


def service_account_kubeconfig(cluster: KubeCluster, path: Path) -> Path:
    """A kubeconfig for the operator's ServiceAccount: the cluster's server and CA, and a token from the
    TokenRequest API (``kubectl create token``), nothing of the admin's credentials."""
    token = cluster.kubectl("-n", SYSTEM, "create", "token", ACCOUNT, "--duration=1h").strip()
    admin = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json"))
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": ACCOUNT, "context": {"cluster": "test", "user": ACCOUNT}}],
        "current-context": ACCOUNT,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def as_operator(cluster: KubeCluster, kubeconfig: Path, *args: str) -> str:
    """kubectl with the operator's credentials; its answer, whatever its exit status (``auth can-i`` exits 1
    for "no")."""
    done = subprocess.run(
        [str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return (done.stdout or done.stderr).strip()


def test_the_operator_runs_the_cce_job_with_only_its_rbac(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    kube_cluster.kubectl(
        "apply", "-f", str(OPERATOR_DEPLOY / "namespace.yaml"), "-f", str(OPERATOR_DEPLOY / "rbac.yaml")
    )
    kubeconfig = service_account_kubeconfig(kube_cluster, tmp_path / "operator.kubeconfig")
    subject = f"system:serviceaccount:{SYSTEM}:{ACCOUNT}"
    assert subject in as_operator(kube_cluster, kubeconfig, "auth", "whoami")
    assert as_operator(kube_cluster, kubeconfig, "auth", "can-i", "create", "pods", "-n", "default") == "yes"
    assert as_operator(kube_cluster, kubeconfig, "auth", "can-i", "get", "secrets", "-n", "default") == "no"
    assert as_operator(kube_cluster, kubeconfig, "auth", "can-i", "update", "leases", "-n", "default") == "no"

    # The Role grants Leases in the operator's own namespace only: that is where its Lease goes.
    with scenario(
        kube_cluster, tmp_path, namespace="default", kubeconfig=kubeconfig, lease_namespace=SYSTEM
    ) as s:
        s.kubectl("apply", "-f", str(CCE_JOB))
        s.wait("a launcher and 3 trainers running", lambda: pod_names(s.pods()) == [LAUNCHER, *TRAINERS])
        s.wait_job("aitrainingjob", JOB, "job Running", lambda st: st.get("phase") == "Running")

        s.kubectl("scale", f"aitrainingjob/{JOB}", "--replicas=2")  # pods deleted, discovery rewritten
        s.wait(
            "scaled in to 2 trainers",
            lambda: [p for p in pod_names(s.pods(), alive_only=False) if "trainer" in p] == TRAINERS[:2],
        )
        s.force_delete(TRAINERS[0])
        s.wait_job(
            "aitrainingjob",
            JOB,
            "trainer-0 replaced",
            lambda st: st["restartCounts"]["trainer"] == 1 and st["phase"] == "Running",
        )
        lease = json.loads(
            s.cluster.kubectl("-n", SYSTEM, "get", "lease", "trainguard-operator", "-o", "json")
        )
        assert lease["spec"]["holderIdentity"]
        log = s.operator.log.read_text()
        assert "forbidden" not in log.lower(), log[-3000:]
