"""The node checker (trusted mode): which pods' checks the operator trusts (``nodechecker.trusted_checks``: the
checker DaemonSet's pods under its ServiceAccount, never a job's pod, on the node the API server bound each
to), the checker's loop (``nodechecker.run``), and on the kwok test cluster the chart's DaemonSet, whose pod's
check (written as the checker writes it: kwok runs no container) isolates its node, while a job pod's forged
report there isolates nothing, and the real ``trainguard node-checker`` process publishing an injected fault.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from benchmarks._kwok import node_list

from tests.k8s.cluster import KubeCluster
from tests.k8s.conftest import run_script
from tests.k8s.operator_harness import ROOT, TRAINGUARD, Scenario, scenario
from tests.k8s.test_node_isolation import fail_pre_check, job
from trainguard.agent.checks.readings import Gpus, Recorded
from trainguard.backends.k8s import isolation, nodechecker
from trainguard.backends.k8s.client import ApiError
from trainguard.backends.k8s.fields import CHECKER_POD_FIELDS, project
from trainguard.backends.k8s.metadata import LABEL_JOB
from trainguard.pod import checks, contract

Obj = dict[str, Any]
CHECKER = nodechecker.NodeChecker(namespace="tg", name="trainguard-node-checker")


def result(at: float = 100.0, item: str = "gpu.ecc", value: float = 2.0) -> checks.CheckResult:
    spec = checks.ITEMS[item]
    verdict = spec.verdict if spec.fails(value, spec.default) else checks.OK
    found = checks.CheckItem(item, verdict, value, spec.default, "devices [0]")
    return checks.CheckResult(checks.PERIODIC, at, 0.1, (found,))


def checker_pod(name: str = "trainguard-node-checker-abcde", node: str = "n1", **changes: Any) -> Obj:
    pod: Obj = {
        "metadata": {
            "name": name,
            "namespace": "tg",
            "resourceVersion": "7",
            "uid": "u",
            "labels": {nodechecker.NAME_LABEL: nodechecker.NAME_VALUE},
            "annotations": {nodechecker.ANNOTATION: json.dumps(result().as_dict()), "other": "x"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": CHECKER.name,
                    "uid": "d",
                    "controller": True,
                }
            ],
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": CHECKER.name,
            "containers": [{"name": "node-checker"}],
        },
        "status": {"phase": "Running"},
    }
    for path, value in changes.items():
        part, _, key = path.partition("__")
        pod[part][key] = value
    return pod


FORGED = {
    "a job's pod in the checker's namespace": checker_pod(
        metadata__labels={nodechecker.NAME_LABEL: nodechecker.NAME_VALUE, LABEL_JOB: "j"}
    ),
    "another namespace": checker_pod(metadata__namespace="users"),
    "another ServiceAccount": checker_pod(spec__serviceAccountName="default"),
    "no DaemonSet owns it": checker_pod(metadata__ownerReferences=[]),
    "another DaemonSet": checker_pod(
        metadata__ownerReferences=[{"kind": "DaemonSet", "name": "mine", "controller": True}]
    ),
}


def test_the_checkers_pod_is_trusted_on_the_node_it_is_bound_to() -> None:
    (found,) = nodechecker.trusted_checks([checker_pod(node="n7")], CHECKER)
    assert (found.node, found.checker, found.result) == ("n7", "trainguard-node-checker-abcde", result())


@pytest.mark.parametrize("case", FORGED)
def test_no_other_pod_is_trusted_whatever_its_labels_and_annotation(case: str) -> None:
    assert nodechecker.trusted_checks([FORGED[case]], CHECKER) == []


def test_a_pod_not_bound_or_without_a_check_or_with_a_broken_one_gives_none() -> None:
    broken = checker_pod()
    broken["metadata"]["annotations"][nodechecker.ANNOTATION] = '["not", "a check"]'
    unbound = checker_pod()
    del unbound["spec"]["nodeName"]
    bare = checker_pod()
    del bare["metadata"]["annotations"][nodechecker.ANNOTATION]
    assert nodechecker.trusted_checks([broken, unbound, bare], CHECKER) == []


@pytest.mark.parametrize("pod", [checker_pod(), *FORGED.values()])
def test_the_cache_keeps_what_the_trust_reads(pod: Obj) -> None:
    kept = project(pod, CHECKER_POD_FIELDS)
    assert nodechecker.trusted_checks([kept], CHECKER) == nodechecker.trusted_checks([pod], CHECKER)
    assert "managedFields" not in kept["metadata"]
    assert "other" not in kept["metadata"].get("annotations", {})


def test_the_checker_checks_every_device_it_found_and_publishes_each_check_until_stopped() -> None:
    readings = Recorded(
        recorded_gpus=Gpus(4, ecc=(0, 0, 3, 0), retired=(0,) * 4, lost=(False,) * 4, throttled=(False,) * 4)
    )
    settings = nodechecker.node_settings(readings, period=0.01, timeout=5)
    assert settings.gpus == 4
    published: list[checks.CheckResult] = []
    stop = threading.Event()

    def publish(found: checks.CheckResult) -> None:
        published.append(found)
        if len(published) == 3:
            stop.set()

    assert nodechecker.run(settings, readings, publish, lambda: {"host.cpu"}, stop) == 0
    assert len(published) == 3
    first = {item.name: item for item in published[0].items}
    assert (first["gpu.ecc"].verdict, first["gpu.ecc"].value) == (checks.HARDWARE, 3.0)
    assert first["gpu.count"].verdict == checks.OK
    assert first["host.cpu"].verdict == checks.HARDWARE  # injected
    assert first["net.rendezvous"].verdict == checks.SKIPPED  # a job's item
    assert published[0].phase == checks.PERIODIC


def test_a_node_without_gpus_skips_them_and_a_check_that_cannot_be_published_once_exits_1() -> None:
    readings = Recorded()
    settings = nodechecker.node_settings(readings, period=60, timeout=5)
    assert settings.gpus == 0

    def refuse(found: checks.CheckResult) -> None:
        skipped = {item.name for item in found.items if item.verdict == checks.SKIPPED}
        assert {"gpu.count", "gpu.ecc", "gpu.lost"} <= skipped
        raise ApiError(403, "pods is forbidden")

    assert nodechecker.run(settings, readings, refuse, frozenset, threading.Event(), once=True) == 1


# ---- on the kwok test cluster ----------------------------------------------------------------------------------

CHART = ROOT / "deploy" / "helm" / "trainguard"


def chart_checker(namespace: str) -> list[Obj]:
    """The chart's node checker (its ServiceAccount, Role, RoleBinding and DaemonSet) for release ``trainguard``
    in ``namespace``, on the nodes of this test only."""
    node_bin = Path(run_script("build", "--node-binaries").split()[0])
    argv = [str(node_bin / "helm"), "template", "trainguard", str(CHART), "-n", namespace]
    argv += [
        "--set",
        "nodeChecker.enabled=true",
        "--set-string",
        f"nodeChecker.nodeSelector.trainguard\\.io/test-nodes={namespace}",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [
        d for d in yaml.safe_load_all(done.stdout) if d and d["metadata"]["name"] == nodechecker.DEFAULT_NAME
    ]


def with_checker(s: Scenario, nodes: int) -> dict[str, str]:
    """``nodes`` nodes with room for a job's pod beside the checker's, the chart's node checker on them, and the
    operator in node-checker mode; the checker pods by node."""
    s.nodes = [f"{s.namespace}-node-{i}" for i in range(nodes)]
    s.cluster.kubectl("apply", "-f", "-", input=node_list(s.nodes, pods=2, group=s.namespace))
    for name in s.nodes:
        s.cluster.kubectl("wait", "--for=condition=Ready", f"node/{name}", "--timeout=60s")
    s.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": chart_checker(s.namespace)}),
    )
    s.operator.extra_args = [
        "--isolation-mode=node-checker",
        f"--node-checker-namespace={s.namespace}",
        f"--node-checker-name={nodechecker.DEFAULT_NAME}",
        "--node-checker-max-isolated-share=1",
    ]
    s.operator.stop()
    s.operator.start()

    def placed() -> dict[str, str] | None:
        found = {
            p["spec"].get("nodeName", ""): p["metadata"]["name"]
            for p in s.pods()
            if p["metadata"].get("labels", {}).get(nodechecker.NAME_LABEL) == nodechecker.NAME_VALUE
            and p["status"].get("phase") == "Running"
        }
        return found if set(found) == set(s.nodes) else None

    by_node: dict[str, str] = s.wait("a checker pod running on every node", placed, 90)
    return by_node


def running(s: Scenario) -> dict[str, str]:
    """The job's running pods (not the checker's) -> their node."""
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in s.pods()
        if LABEL_JOB in (p["metadata"].get("labels") or {})
        and p["status"].get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    }


def isolated(s: Scenario, node: str) -> Obj | None:
    found: Obj = s.cluster.get_json("get", f"node/{node}")
    return found if isolation.is_isolated(found) else None


@pytest.mark.k8s
@pytest.mark.timeout(300)
def test_the_checkers_check_isolates_its_node_and_a_jobs_forged_report_isolates_nothing(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    with scenario(kube_cluster, tmp_path, nodes=0) as s:
        checkers = with_checker(s, 4)
        s.wait("the mode said", lambda: "isolation by the node checker alone" in s.operator.log.read_text())
        bad = s.nodes[0]
        # As the checker writes it (kwok runs no container): its own pod's annotation.
        nodechecker.publish(
            kube_cluster.api(), s.namespace, checkers[bad], result(at=1000.0, item="gpu.lost", value=1)
        )
        node = s.wait(f"node {bad} isolated by the checker", lambda: isolated(s, bad))
        by = node["metadata"]["annotations"][isolation.BY]
        assert by.startswith(f"node checker {s.namespace}/{checkers[bad]}: node {bad} isolated")
        assert "gpu.lost read 1 (threshold 0)" in by
        events = s.cluster.get_json("get", "events", "-n", "default")["items"]
        (event,) = [
            e for e in events if e["involvedObject"].get("name") == bad and e["reason"] == "NodeIsolated"
        ]
        assert checkers[bad] in event["message"]

        # A job pod's own report, forged or not, isolates nothing here: its pod is issued again elsewhere.
        s.kubectl("apply", "-f", "-", input=json.dumps(job()))
        first = s.wait("2 pods running", lambda: (lambda r: r if len(r) == 2 else None)(running(s)), 90)
        pod = "isolate-worker-0"
        forged_on = first[pod]
        fail_pre_check(s, pod)
        s.wait(
            "the pod running again elsewhere",
            lambda: (lambda r: r if r.get(pod) not in (None, forged_on) else None)(running(s)),
            90,
        )
        status = s.wait_job(
            "trainingjob",
            "isolate",
            "the reissue recorded",
            lambda st: (st.get("faultCheck") or {}).get("reissues") == 1,
        )["status"]
        assert not status["faultCheck"].get("isolated")
        assert not isolated(s, forged_on)
        said = [
            e
            for e in s.cluster.get_json("get", "events", "-n", s.namespace)["items"]
            if e["reason"] == "NodeNotIsolated"
        ]
        assert said
        assert "only the node checker isolates" in said[0]["message"]

        # A pod that calls itself a checker (the label, the annotation) but is not the DaemonSet's is not trusted.
        impostor = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "impostor",
                "labels": {nodechecker.NAME_LABEL: nodechecker.NAME_VALUE},
                "annotations": {nodechecker.ANNOTATION: json.dumps(result(at=2000.0).as_dict())},
            },
            "spec": {
                "nodeName": s.nodes[1],
                "serviceAccountName": nodechecker.DEFAULT_NAME,
                "containers": [{"name": "c", "image": "img"}],
            },
        }
        s.kubectl("apply", "-f", "-", input=json.dumps(impostor))
        # The checker's own pod's passing check on another node, published after it: once the operator acted
        # on that one it has looked at the impostor too.
        nodechecker.publish(kube_cluster.api(), s.namespace, checkers[s.nodes[2]], result(at=2001.0, value=0))
        checker_on = s.nodes[3]
        nodechecker.publish(kube_cluster.api(), s.namespace, checkers[checker_on], result(at=2002.0))
        s.wait(f"node {checker_on} isolated by the checker", lambda: isolated(s, checker_on))
        assert not isolated(s, s.nodes[1])


@pytest.mark.k8s
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_node_checker_process_publishes_an_injected_fault_and_the_operator_isolates_the_node(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    with scenario(kube_cluster, tmp_path, nodes=0) as s:
        checkers = with_checker(s, 2)
        bad = s.nodes[1]
        injected = tmp_path / "inject"
        injected.mkdir()
        (injected / bad).write_text("gpu.ecc\n")
        env = {
            **os.environ,
            nodechecker.ENV_POD_NAME: checkers[bad],
            nodechecker.ENV_POD_NAMESPACE: s.namespace,
            contract.ENV_NODE_NAME: bad,
            contract.ENV_FAULT_INJECT: str(injected),
        }
        argv = [str(TRAINGUARD), "node-checker", "--once", "--kubeconfig", str(kube_cluster.kubeconfig)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        pod = s.cluster.get_json("get", f"pod/{checkers[bad]}", "-n", s.namespace)
        written = checks.CheckResult.from_dict(
            json.loads(pod["metadata"]["annotations"][nodechecker.ANNOTATION])
        )
        assert written.verdict == checks.HARDWARE
        assert [item.name for item in written.failed] == ["gpu.ecc"]
        node = s.wait(f"node {bad} isolated", lambda: isolated(s, bad))
        assert "gpu.ecc" in node["metadata"]["annotations"][isolation.BY]
        assert not isolated(s, s.nodes[0])
