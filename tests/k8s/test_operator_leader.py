"""Two operator processes on one cluster: only the Lease holder acts, and when it is SIGKILLed (no release of
the Lease) the other takes over once the Lease has expired and carries on, nothing done twice."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import ROOT, OperatorProcess, Scenario, pod_names, scenario

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

CCE_JOB = ROOT / "examples" / "jobs" / "cce-horovod-elastic.yaml"
JOB = "test-horovod-elastic"
LAUNCHER = f"{JOB}-launcher-0"
TRAINERS = [f"{JOB}-trainer-{i}" for i in range(3)]
#: The operator's Lease: 15 s, renewed every 2 s (trainguard.backends.k8s.leader's defaults).
LEASE_SECONDS, RENEW_SECONDS = 15, 2


def _holder(s: Scenario) -> str:
    """The Lease's holder; "" before either replica has written the Lease."""
    listed = s.kubectl("get", "lease", "trainguard-operator", "--ignore-not-found", "-o", "json")
    if not listed.strip():
        return ""
    return str(json.loads(listed)["spec"].get("holderIdentity") or "")


def _launch_events(s: Scenario) -> list[tuple[str, str]]:
    """(pod, replica that reported it) of every SuccessfulCreatePod Event."""
    listed = s.kubectl("get", "events", "--field-selector", "reason=SuccessfulCreatePod", "-o", "json")
    return sorted(
        (e["involvedObject"]["name"], e.get("reportingInstance", "")) for e in json.loads(listed)["items"]
    )


def _generations(s: Scenario) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["labels"]["trainguard.io/generation"] for p in s.pods()}


def test_only_the_leader_acts_and_the_other_takes_over_when_it_dies(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    with scenario(kube_cluster, tmp_path, namespace="default", operator_id="first") as s:
        second = OperatorProcess(kube_cluster, s.namespace, tmp_path / "second.log")
        second.start(identity="second")
        try:
            s.wait("a leader elected", lambda: _holder(s) in ("first", "second"))
            s.kubectl("apply", "-f", str(CCE_JOB))
            s.wait("all pods running", lambda: pod_names(s.pods()) == [LAUNCHER, *TRAINERS])
            s.wait_job("aitrainingjob", JOB, "job Running", lambda st: st.get("phase") == "Running")
            leader = _holder(s)
            follower = "second" if leader == "first" else "first"
            # Both replicas watch the job; the leader alone launched its pods, each once.
            assert _launch_events(s) == [(pod, leader) for pod in sorted((LAUNCHER, *TRAINERS))]
            assert _generations(s) == dict.fromkeys((LAUNCHER, *TRAINERS), "1")
            (s.operator if leader == "first" else second).kill()
            killed = time.monotonic()
            s.force_delete(TRAINERS[2])  # a fault while no one leads

            # The follower may take the Lease once it has gone unrenewed for its duration; it looks every
            # RENEW_SECONDS, and this test polls with kubectl (a few seconds more under load).
            s.wait("the follower holding the lease", lambda: _holder(s) == follower, timeout=40)
            took_over = time.monotonic() - killed
            assert took_over <= LEASE_SECONDS + RENEW_SECONDS + 10

            job = s.wait_job(
                "aitrainingjob",
                JOB,
                "trainer-2 replaced by the new leader",
                lambda st: (
                    st["restartCounts"]["trainer"] == 1
                    and next(p for p in st["pods"] if p["name"] == TRAINERS[2])["generation"] == 2
                    and st["phase"] == "Running"
                ),
                timeout=60,
            )
            assert job["status"]["restartCounts"] == {"launcher": 0, "trainer": 1}
            assert _generations(s) == {LAUNCHER: "1", TRAINERS[0]: "1", TRAINERS[1]: "1", TRAINERS[2]: "2"}
            # The 4 first launches by the old leader and trainer-2's by the new one, once each.
            expected = [(pod, leader) for pod in (LAUNCHER, *TRAINERS)] + [(TRAINERS[2], follower)]
            assert _launch_events(s) == sorted(expected)
            faults = [h for h in job["status"]["history"] if h["kind"] == "fault"]
            assert [f["fault"] for f in faults] == ["PodForceDeleted"]
        finally:
            second.stop()
