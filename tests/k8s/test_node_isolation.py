"""The fault tolerance check's isolation on the kwok test cluster: a pod whose agent's pre-check found its
node's GPU faulty (kwok runs no agent: the pod ends as the agent ends it, exit 120 with the agent's final
report as its termination message and its summary in the pod's annotation) has its node tainted, labelled and
annotated, with a Node Event naming the job and pod; the pod runs again on another node; ``trainguard node
list|release --kubeconfig`` show and lift the isolation. An operator whose role may not patch nodes isolates
nothing, says why, and the job runs on.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from benchmarks._kwok import check_failed_patch

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import ROOT, TRAINGUARD, Scenario, scenario
from trainguard.backends.k8s import isolation, manifests
from trainguard.pod import checks, contract

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

Obj = dict[str, Any]
JOB = "isolate"
TJ = "trainingjob"


def job(name: str = JOB, replicas: int = 2) -> Obj:
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "frameworkType": "generic",
            "faultCheck": {"enabled": True},
            "replicaSpecs": {
                "worker": {
                    "replicas": replicas,
                    "restartPolicy": "OnFailure",
                    "restartLimit": 3,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "main", "image": "img", "command": ["python", "train.py"]}
                            ]
                        }
                    },
                }
            },
        },
    }


def fail_pre_check(s: Scenario, pod: str, item: str = "gpu.ecc", value: float = 2.0) -> None:
    """End ``pod`` as its agent does when its pre-check finds ``item`` faulty (``agent.supervisor``)."""
    spec = checks.ITEMS[item]
    found = checks.CheckItem(item, spec.verdict, value, spec.default, "injected")
    result = checks.CheckResult(checks.PRE, 1000.0, 0.2, (found,)).as_dict()
    summary = {"attempt": 0, "checks": 1, "lastCheck": result, "failedCheck": result}
    final = {
        "event": contract.REPORT_EXITED,
        "exit_code": checks.EXIT_CHECK_FAILED,
        "reason": checks.REASON_HARDWARE,
    }
    patch = check_failed_patch(summary, final, checks.EXIT_CHECK_FAILED)
    s.kubectl("patch", "pod", pod, "--type=merge", "-p", json.dumps(patch))


def running(s: Scenario) -> dict[str, str]:
    """Running pods of the job -> their node."""
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in s.pods()
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


def trainguard(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINGUARD), *args], capture_output=True, text=True, timeout=60, check=False)


def test_a_node_whose_pre_check_failed_is_isolated_the_pod_runs_elsewhere_and_release_lifts_it(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    kubeconfig = str(kube_cluster.kubeconfig)
    with scenario(kube_cluster, tmp_path, nodes=3) as s:
        s.operator.extra_args = ["--fault-injection"]
        s.operator.stop()
        s.operator.start()
        s.kubectl("apply", "-f", "-", input=json.dumps(job()))
        first = s.wait("2 pods running", lambda: (lambda r: r if len(r) == 2 else None)(running(s)))
        pod = f"{JOB}-worker-0"
        bad = first[pod]
        # The injection aid is wired into every pod: its node by the downward API, the optional ConfigMap.
        spec = next(p for p in s.pods() if p["metadata"]["name"] == pod)["spec"]
        env = {e["name"]: e for e in spec["containers"][0]["env"]}
        assert env[contract.ENV_NODE_NAME]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        assert env[contract.ENV_FAULT_INJECT]["value"] == manifests.FAULT_INJECT_DIR

        fail_pre_check(s, pod)

        def isolated() -> Obj | None:
            node = s.cluster.get_json("get", f"node/{bad}")
            return node if isolation.is_isolated(node) else None

        node = s.wait(f"node {bad} isolated", isolated)
        assert node["metadata"]["labels"][isolation.KEY] == "true"
        by = node["metadata"]["annotations"][isolation.BY]
        assert by.startswith(f"{s.namespace}/{JOB}/{pod}: ")
        assert "gpu.ecc" in by
        events = s.cluster.get_json("get", "events", "-n", "default")["items"]
        (event,) = [
            e for e in events if e["involvedObject"].get("name") == bad and e["reason"] == "NodeIsolated"
        ]
        assert pod in event["message"]
        assert JOB in event["message"]

        again = s.wait(
            "the pod running again on another node",
            lambda: (lambda r: r if len(r) == 2 and r.get(pod) not in (None, bad) else None)(running(s)),
        )
        assert bad not in again.values()
        status = s.wait_job(TJ, JOB, "job Running", lambda st: st.get("phase") == "Running")["status"]
        checked = status["faultCheck"]
        assert (checked["reissues"], checked["isolated"]) == (
            1,
            [bad],
        )  # issued again, not counted as the code's
        (entry,) = [e for e in status["history"] if e.get("node") == bad and e.get("kind") == "isolate"]
        assert entry["check"]["phase"] == "pre"  # ModelArts' scenario 1: the pre-check, faulty hardware
        assert entry["check"]["scenario"] == 1

        listed = trainguard("node", "list", "--kubeconfig", kubeconfig)
        assert listed.returncode == 0, listed.stderr
        assert bad in listed.stdout
        assert pod in listed.stdout
        as_json = json.loads(trainguard("node", "list", "--kubeconfig", kubeconfig, "-o", "json").stdout)
        assert [item["name"] for item in as_json["items"]] == [bad]

        released = trainguard("node", "release", bad, "--kubeconfig", kubeconfig)
        assert released.returncode == 0, released.stderr
        assert "released" in released.stdout
        node = s.cluster.get_json("get", f"node/{bad}")
        assert not isolation.is_isolated(node)
        assert isolation.KEY not in (node["metadata"].get("labels") or {})
        assert "no node is isolated" in trainguard("node", "list", "--kubeconfig", kubeconfig).stdout
        again = trainguard("node", "release", bad, "--kubeconfig", kubeconfig)
        assert (again.returncode, "not isolated" in again.stdout) == (0, True)

        # The injection aid's ConfigMap, written by the chaos verb for the pods of a namespace.
        injected = trainguard(
            "chaos",
            "hardware-fault",
            bad,
            "--item",
            "gpu.lost",
            "--kubeconfig",
            kubeconfig,
            "-n",
            s.namespace,
        )
        assert injected.returncode == 0, injected.stderr
        config = s.cluster.get_json(
            "get", f"configmap/{manifests.FAULT_INJECT_CONFIG_MAP}", "-n", s.namespace
        )
        assert config["data"] == {bad: "gpu.lost\n"}
        wrong = trainguard("chaos", "hardware-fault", bad, "--item", "gpu.nope", "--kubeconfig", kubeconfig)
        assert wrong.returncode != 0
        assert "not a check item" in wrong.stderr
        assert "Traceback" not in wrong.stderr
        repaired = trainguard("chaos", "hardware-repair", bad, "--kubeconfig", kubeconfig, "-n", s.namespace)
        assert repaired.returncode == 0, repaired.stderr
        config = s.cluster.get_json(
            "get", f"configmap/{manifests.FAULT_INJECT_CONFIG_MAP}", "-n", s.namespace
        )
        assert not config.get("data")


# ---- an operator that may not patch nodes ----------------------------------------------------------------------


def restricted_operator(cluster: KubeCluster, namespace: str, path: Path) -> Path:
    """A ServiceAccount bound to the ClusterRole of deploy/operator/rbac.yaml less ``patch`` on nodes (and
    to Leases in ``namespace``); a kubeconfig with its token."""
    account = f"{namespace}-operator"
    rbac = [d for d in yaml.safe_load_all((ROOT / "deploy/operator/rbac.yaml").read_text()) if d]
    role = next(d for d in rbac if d["kind"] == "ClusterRole")
    for rule in role["rules"]:
        if rule["resources"] == ["nodes"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "patch"]
    role["metadata"] = {"name": account}
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}},
        role,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account},
            "subjects": [subject],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": account, "namespace": namespace},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": account, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [subject],
        },
    ]
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    token = cluster.kubectl("-n", namespace, "create", "token", account, "--duration=1h").strip()
    admin = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json"))
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": "test", "user": account}}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_an_operator_that_may_not_patch_nodes_isolates_nothing_says_why_and_the_job_runs_on(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    with scenario(kube_cluster, tmp_path, nodes=3) as s:
        s.operator.stop()
        s.operator.kubeconfig = restricted_operator(
            kube_cluster, s.namespace, tmp_path / "operator.kubeconfig"
        )
        s.operator.start()
        try:
            s.kubectl("apply", "-f", "-", input=json.dumps(job()))
            first = s.wait("2 pods running", lambda: (lambda r: r if len(r) == 2 else None)(running(s)), 90)
            pod = f"{JOB}-worker-0"
            bad = first[pod]
            fail_pre_check(s, pod)

            def refused() -> Obj | None:
                events = s.cluster.get_json("get", "events", "-n", s.namespace)["items"]
                return next((e for e in events if e["reason"] == "NodeNotIsolated"), None)

            event = s.wait("the refusal said", refused)
            assert bad in event["message"]
            assert "patch on nodes" in event["message"]
            again = s.wait(
                "the pod running again on another node",
                lambda: (lambda r: r if len(r) == 2 and r.get(pod) not in (None, bad) else None)(running(s)),
            )
            assert bad not in again.values()
            s.wait_job(TJ, JOB, "job Running", lambda st: st.get("phase") == "Running")
            assert not isolation.is_isolated(s.cluster.get_json("get", f"node/{bad}"))
            assert "forbidden" in s.operator.log.read_text()
        finally:
            s.operator.stop()
            kube_cluster.kubectl(
                "delete", "clusterrole,clusterrolebinding", f"{s.namespace}-operator", "--ignore-not-found"
            )


# ---- the cool-down ---------------------------------------------------------------------------------------------


def test_an_isolated_node_is_released_on_probation_after_its_cool_down_which_doubles_when_isolated_again(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """An operator with ``--isolation-cooldown 4``: a node a pre-check isolated is released on probation after
    4 s (its strikes kept, a ``NodeReleased`` Event); a later job's pod lands there, and its pre-check (the
    re-check) failing isolates it again, strike 2, for 8 s; ``trainguard node release`` clears its strikes.
    The jobs' pods are held to that one node (a nodeSelector)."""
    with scenario(kube_cluster, tmp_path, nodes=2) as s:
        s.operator.extra_args = ["--isolation-cooldown", "4"]
        s.operator.stop()
        s.operator.start()
        bad = s.nodes[0]
        pinned = job(replicas=1)
        template = pinned["spec"]["replicaSpecs"]["worker"]["template"]["spec"]
        template["nodeSelector"] = {"kubernetes.io/hostname": bad}
        s.kubectl("apply", "-f", "-", input=json.dumps(pinned))
        pod = f"{JOB}-worker-0"
        s.wait("the pod running on its node", lambda: running(s).get(pod) == bad or None)

        def node() -> Obj:
            return s.cluster.get_json("get", f"node/{bad}")

        def isolated() -> Obj | None:
            found = node()
            return found if isolation.is_isolated(found) else None

        fail_pre_check(s, pod)
        first = s.wait(f"node {bad} isolated", isolated)
        assert first["metadata"]["annotations"][isolation.STRIKES] == "1"
        isolated_at = float(first["metadata"]["annotations"][isolation.AT])
        released = s.wait(f"node {bad} released on probation", lambda: None if isolated() else node())
        assert released["metadata"]["labels"][isolation.PROBATION] == "true"
        assert released["metadata"]["annotations"][isolation.STRIKES] == "1"
        assert isolation.BY not in released["metadata"]["annotations"]
        events = s.cluster.get_json("get", "events", "-n", "default")["items"]
        (event,) = [
            e for e in events if e["involvedObject"].get("name") == bad and e["reason"] == "NodeReleased"
        ]
        assert "cool-down of 4 s (strike 1)" in event["message"]
        assert "isolates it for 8 s" in event["message"]
        at = datetime.fromisoformat(event["firstTimestamp"].replace("Z", "+00:00")).timestamp()
        assert at >= isolated_at + 4 - 1  # not before its cool-down (RFC 3339 keeps whole seconds)

        # A later job's pod lands there (the first job's pod was issued again off that node); its pre-check, the
        # node's re-check, fails again.
        later = job("recheck", replicas=1)
        later["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["nodeSelector"] = {
            "kubernetes.io/hostname": bad
        }
        s.kubectl("apply", "-f", "-", input=json.dumps(later))
        checking = "recheck-worker-0"

        def landed() -> bool:
            found = [p for p in s.pods() if p["metadata"]["name"] == checking]
            return (
                bool(found)
                and found[0]["status"].get("phase") == "Running"
                and found[0]["spec"].get("nodeName") == bad
            )

        s.wait("the later job's pod running on the node on probation", landed)
        fail_pre_check(s, checking)
        again = s.wait(f"node {bad} isolated again", isolated)
        assert again["metadata"]["annotations"][isolation.STRIKES] == "2"
        assert isolation.PROBATION not in (again["metadata"].get("labels") or {})

        # An administrator's release clears its strikes.
        done = trainguard("node", "release", bad, "--kubeconfig", str(kube_cluster.kubeconfig))
        assert done.returncode == 0, done.stderr
        assert isolation.STRIKES not in (node()["metadata"].get("annotations") or {})
        assert not isolation.is_isolated(node())
