"""The conditions of CCE's AITrainingJob example, each one seen: Pending -> Creating -> Running with CCE's
reasons and messages.

kwok makes a pod Ready the moment it is scheduled, too fast for a Creating phase to be written. A Stage that
holds the launcher's readiness for a few seconds (the trainers start at once) leaves the job Creating with
the launcher as the one pod still creating containers, as in the status CCE's documentation shows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import ROOT, pod_names, scenario, slow_ready

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

CCE_JOB = ROOT / "examples" / "jobs" / "cce-horovod-elastic.yaml"
JOB = "test-horovod-elastic"
LAUNCHER = f"{JOB}-launcher-0"
TRAINERS = [f"{JOB}-trainer-{i}" for i in range(3)]


def test_conditions_go_pending_creating_running_as_cce_shows_them(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    labels = {"trainguard.io/job": JOB, "trainguard.io/role": "launcher"}
    with (
        slow_ready(kube_cluster, "trainguard-test-slow-launcher", labels, delay_ms=6000),
        scenario(kube_cluster, tmp_path, namespace="default") as s,
    ):
        s.kubectl("apply", "-f", str(CCE_JOB))
        creating = s.wait_job(
            "aitrainingjob", JOB, "job Creating", lambda st: st.get("phase") == "Creating", timeout=30
        )
        assert [c["type"] for c in creating["status"]["conditions"]] == ["Pending", "Creating"]

        job = s.wait_job("aitrainingjob", JOB, "job Running", lambda st: st.get("phase") == "Running")
        assert pod_names(s.pods()) == [LAUNCHER, *TRAINERS]
        conditions = [
            (c["type"], c["status"], c["reason"], c["message"]) for c in job["status"]["conditions"]
        ]
        assert conditions == [
            ("Pending", "False", "TrainingJobPending", "all pods are waiting for scheduling"),
            ("Creating", "False", "TrainingJobCreating", f"pods [{LAUNCHER}] creating containers"),
            ("Running", "True", "TrainingJobRunning", "all pods are running"),
        ]
