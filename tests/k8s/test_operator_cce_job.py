"""CCE's AITrainingJob example on a real control plane: ``kubectl apply`` of the CCE YAML, unchanged, and the
operator runs it as CCE's documentation shows (conditions, pods, scaling with ``kubectl scale``), then survives faults and its own death."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import ROOT, Scenario, pod_names, scenario

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

CCE_JOB = ROOT / "examples" / "jobs" / "cce-horovod-elastic.yaml"
JOB = "test-horovod-elastic"
AITJ = "aitrainingjob"
LAUNCHER = f"{JOB}-launcher-0"
TRAINERS = [f"{JOB}-trainer-{i}" for i in range(3)]


def _running(s: Scenario) -> list[str]:
    return pod_names(s.pods())


def _started(s: Scenario) -> dict:
    s.kubectl("apply", "-f", str(CCE_JOB))
    s.wait("a launcher and 3 trainers running", lambda: _running(s) == [LAUNCHER, *TRAINERS])
    return s.wait_job(AITJ, JOB, "job Running", lambda st: st.get("phase") == "Running")


def _pod(status: dict, name: str) -> dict:
    return next(p for p in status["pods"] if p["name"] == name)


def test_cce_yaml_runs_scales_out_and_in(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    with scenario(kube_cluster, tmp_path, namespace="default") as s:
        job = _started(s)
        status = job["status"]
        types = [c["type"] for c in status["conditions"]]
        assert types[0] == "Pending"
        assert types[-1] == "Running"
        assert status["conditions"][-1]["message"] == "all pods are running"
        # Times as CCE's console prints them ("2022-01-14T09:01:52Z"), read back by the operator.
        for condition in status["conditions"]:
            for key in ("lastTransitionTime", "lastProbeTime"):
                assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", condition[key]), condition
        assert status["restartCounts"] == {"launcher": 0, "trainer": 0}
        pods = {p["metadata"]["name"]: p for p in s.pods()}
        owner = pods[LAUNCHER]["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("AITrainingJob", JOB, job["metadata"]["uid"])
        assert pods[LAUNCHER]["spec"]["containers"][0]["command"][:2] == [
            "/trainguard/bin/trainguard-entry",
            "run",
        ]
        assert pods[TRAINERS[1]]["metadata"]["labels"]["trainguard.io/index"] == "1"
        assert json.loads(s.kubectl("get", "service", JOB, "-o", "json"))["spec"]["clusterIP"] == "None"

        s.kubectl("scale", f"{AITJ}/{JOB}", "--replicas=4")
        fourth = f"{JOB}-trainer-3"
        s.wait("a 4th trainer running", lambda: fourth in _running(s))
        job = s.wait_job(
            AITJ,
            JOB,
            "Running with 4 trainers",
            lambda st: st["replicas"]["trainer"] == 4 and st["phase"] == "Running",
        )
        scaling = next(c for c in job["status"]["conditions"] if c["type"] == "Scaling")
        assert scaling["message"] == (
            f"trainingJob default/{JOB} scaleout Operation scaleout scale num 1 scale pods [{fourth}], "
            "replicas name trainer job version 1"
        )
        scale = json.loads(
            s.kubectl(
                "get",
                "--raw",
                f"/apis/kongming.cce.baiudbce.com/v1/namespaces/default/aitrainingjobs/{JOB}/scale",
            )
        )
        assert scale["status"]["replicas"] == 4

        s.kubectl("scale", f"{AITJ}/{JOB}", "--replicas=2")
        s.wait(
            "scaled in to 2 trainers",
            lambda: [p for p in pod_names(s.pods(), alive_only=False) if "trainer" in p] == TRAINERS[:2],
        )
        job = s.wait_job(
            AITJ,
            JOB,
            "Running with 2 trainers",
            lambda st: st["replicas"]["trainer"] == 2 and st["phase"] == "Running",
        )
        assert "scalein" in next(c for c in job["status"]["conditions"] if c["type"] == "Scaling")["message"]
        events = s.kubectl("get", "events", "--field-selector", "reason=Scaling", "-o", "name")
        assert events.strip()


def test_a_scale_out_whose_pod_cannot_be_placed_is_rolled_back_after_the_scaling_timeout(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    with scenario(kube_cluster, tmp_path, namespace="default", nodes=4) as s:
        _started(s)
        s.kubectl("annotate", f"{AITJ}/{JOB}", "trainguard.io/scaling-timeout-seconds=5")
        for node in s.nodes:  # no room for a new pod anywhere
            s.cluster.kubectl("cordon", node)
        s.kubectl("scale", f"{AITJ}/{JOB}", "--replicas=4")
        fourth = f"{JOB}-trainer-3"
        s.wait("the 4th trainer's pod pending", lambda: fourth in pod_names(s.pods(), alive_only=False))
        job = s.wait_job(
            AITJ,
            JOB,
            "the scale-out rolled back",
            lambda st: (
                any(h["kind"] == "scale-timeout" for h in st.get("history", [])) and st["phase"] == "Running"
            ),
        )
        entry = next(h for h in job["status"]["history"] if h["kind"] == "scale-timeout")
        assert (entry["pods"], entry["scaleFrom"], entry["scaleTo"]) == ([fourth], 4, 3), entry
        assert job["status"]["replicas"]["trainer"] == 3
        s.wait("the 4th trainer's pod gone", lambda: fourth not in pod_names(s.pods(), alive_only=False))
        assert _running(s) == [LAUNCHER, *TRAINERS]  # the others trained on, untouched
        events = s.kubectl("get", "events", "--field-selector", "reason=ScaleTimeout", "-o", "json")
        (event,) = json.loads(events)["items"]
        assert event["type"] == "Warning"
        assert fourth in event["message"]


def test_force_deleted_trainer_is_replaced_and_counted(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    with scenario(kube_cluster, tmp_path, namespace="default") as s:
        _started(s)
        s.force_delete(TRAINERS[0])
        job = s.wait_job(
            AITJ,
            JOB,
            "trainer-0 replaced",
            lambda st: (
                st["restartCounts"]["trainer"] == 1
                and _pod(st, TRAINERS[0])["phase"] == "Running"
                and _pod(st, TRAINERS[0])["generation"] == 2
            ),
        )
        fault = [h for h in job["status"]["history"] if h["kind"] == "fault"][-1]
        assert (fault["fault"], fault["counted"]) == ("PodForceDeleted", True)
        labels = next(p for p in s.pods() if p["metadata"]["name"] == TRAINERS[0])["metadata"]["labels"]
        assert labels["trainguard.io/generation"] == "2"


def test_pods_of_a_node_gone_not_ready_are_replaced_elsewhere(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    with scenario(kube_cluster, tmp_path, namespace="default", nodes=7) as s:
        job = _started(s)
        node = _pod(job["status"], TRAINERS[1])["node"]
        s.node_down(node)
        job = s.wait_job(
            AITJ,
            JOB,
            "trainer-1 replaced on another node",
            lambda st: (
                _pod(st, TRAINERS[1])["generation"] == 2 and _pod(st, TRAINERS[1])["phase"] == "Running"
            ),
            timeout=90,
        )
        assert _pod(job["status"], TRAINERS[1])["node"] != node
        fault = [h for h in job["status"]["history"] if h["kind"] == "fault"][-1]
        assert fault["fault"] == "NodeNotReady"
        s.wait(
            "the pod on the dead node force-cleaned",
            lambda: all(p["spec"].get("nodeName") != node for p in s.pods()),
        )


def test_exit_129_restarts_the_launcher_and_operator_restart_loses_nothing(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    with scenario(kube_cluster, tmp_path, namespace="default") as s:
        _started(s)
        s.exit_pod(LAUNCHER, 129)
        job = s.wait_job(
            AITJ,
            JOB,
            "launcher restarted by its exit-code rule",
            lambda st: st["restartCounts"]["launcher"] == 1 and _pod(st, LAUNCHER)["phase"] == "Running",
        )
        fault = [h for h in job["status"]["history"] if h["kind"] == "fault"][-1]
        assert (fault["exitCode"], fault["rule"]) == (129, "faultTolerantPolicy[0]")

        # Killed mid-scenario: a fault happens while no operator runs, then a new one takes over.
        s.operator.kill()
        s.force_delete(TRAINERS[2])
        s.operator.start(identity="successor")
        job = s.wait_job(
            AITJ,
            JOB,
            "trainer-2 replaced by the successor",
            lambda st: (
                st["restartCounts"]["trainer"] == 1
                and _pod(st, TRAINERS[2])["phase"] == "Running"
                and _pod(st, TRAINERS[2])["generation"] == 2
            ),
            timeout=90,
        )
        assert job["status"]["restartCounts"] == {"launcher": 1, "trainer": 1}
        assert job["status"]["RestartCount"]["trainer"] == 1  # CCE's own key, as CCE's page shows it
        pods = s.pods()
        assert sorted(p["metadata"]["name"] for p in pods) == [LAUNCHER, *TRAINERS]
        generations = {
            p["metadata"]["name"]: p["metadata"]["labels"]["trainguard.io/generation"] for p in pods
        }
        assert generations == {LAUNCHER: "2", TRAINERS[0]: "1", TRAINERS[1]: "1", TRAINERS[2]: "2"}
        launches = list(
            s.kubectl("get", "events", "--field-selector", "reason=SuccessfulCreatePod", "-o", "name").split()
        )
        assert len(launches) == 6  # 4 at start, the launcher's restart, trainer-2's: nothing twice


def test_a_fault_past_restart_limit_fails_the_job(kube_cluster: KubeCluster, tmp_path: Path) -> None:
    with scenario(kube_cluster, tmp_path, namespace="default") as s:
        text = CCE_JOB.read_text().replace("restartLimit: 100", "restartLimit: 1", 1)
        s.kubectl("apply", "-f", "-", input=text)
        s.wait("all pods running", lambda: _running(s) == [LAUNCHER, *TRAINERS])
        s.exit_pod(LAUNCHER, 129)
        s.wait_job(
            AITJ,
            JOB,
            "first restart",
            lambda st: st["restartCounts"]["launcher"] == 1 and _pod(st, LAUNCHER)["phase"] == "Running",
        )
        s.exit_pod(LAUNCHER, 129)
        job = s.wait_job(AITJ, JOB, "job Failed (failPolicy Any)", lambda st: st["phase"] == "Failed")
        assert job["status"]["conditions"][-1]["type"] == "Failed"
