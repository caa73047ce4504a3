"""A HorizontalPodAutoscaler scales the trainers of CCE's AITrainingJob example through the AITrainingJob's scale subresource.

The cluster's kube-controller-manager runs the real HPA controller. There is no metrics server here, so the
test uses the two rules the HPA applies before it reads any metric: replicas below ``minReplicas`` are raised
to it, replicas above ``maxReplicas`` are lowered to it. Both go through ``/scale`` exactly as a metric-driven
change would, and the operator must turn each into started or stopped trainers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import ROOT, Scenario, pod_names, scenario

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

CCE_JOB = ROOT / "examples" / "jobs" / "cce-horovod-elastic.yaml"
JOB = "test-horovod-elastic"
AITJ = "aitrainingjob"
# The HPA controller looks at each autoscaler every 15 s (its default sync period).
HPA_DEADLINE = 90


def _hpa(low: int, high: int) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": JOB},
        "spec": {
            "scaleTargetRef": {
                "apiVersion": "kongming.cce.baiudbce.com/v1",
                "kind": "AITrainingJob",
                "name": JOB,
            },
            "minReplicas": low,
            "maxReplicas": high,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                }
            ],
        },
    }


def _trainers(s: Scenario) -> list[str]:
    return [p for p in pod_names(s.pods()) if "-trainer-" in p]


def _rescale_messages(s: Scenario) -> list[str]:
    events = json.loads(
        s.kubectl("get", "events", "--field-selector", "reason=SuccessfulRescale", "-o", "json")
    )
    return [e["message"] for e in events["items"]]


def test_an_hpa_scales_the_trainers_out_and_in_through_the_scale_subresource(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    with scenario(kube_cluster, tmp_path) as s:
        manifest = yaml.safe_load(CCE_JOB.read_text())
        del manifest["metadata"]["namespace"]
        s.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        trainers = [f"{JOB}-trainer-{i}" for i in range(3)]
        s.wait("3 trainers running", lambda: _trainers(s) == trainers)
        job = s.wait_job(AITJ, JOB, "job Running", lambda st: st.get("phase") == "Running")
        assert job["status"]["selector"]

        s.kubectl("apply", "-f", "-", input=json.dumps(_hpa(4, 5)))
        s.wait("a 4th trainer started by the HPA", lambda: len(_trainers(s)) == 4, timeout=HPA_DEADLINE)
        s.wait_job(AITJ, JOB, "Running with 4 trainers", lambda st: st["replicas"]["trainer"] == 4)
        assert s.job(AITJ, JOB)["spec"]["replicaSpecs"]["trainer"]["replicas"] == 4
        assert any("below Spec.MinReplicas" in m for m in _rescale_messages(s)), _rescale_messages(s)
        hpa = json.loads(s.kubectl("get", "hpa", JOB, "-o", "json"))
        able = next(c for c in hpa["status"]["conditions"] if c["type"] == "AbleToScale")
        assert able["status"] == "True", able

        s.kubectl("apply", "-f", "-", input=json.dumps(_hpa(2, 2)))
        s.wait(
            "scaled in to 2 trainers by the HPA",
            lambda: [p for p in pod_names(s.pods(), alive_only=False) if "-trainer-" in p] == trainers[:2],
            timeout=HPA_DEADLINE,
        )
        job = s.wait_job(
            AITJ,
            JOB,
            "Running with 2 trainers",
            lambda st: st["replicas"]["trainer"] == 2 and st["phase"] == "Running",
        )
        assert "scalein" in next(c for c in job["status"]["conditions"] if c["type"] == "Scaling")["message"]
        assert any("above Spec.MaxReplicas" in m for m in _rescale_messages(s)), _rescale_messages(s)
