"""Fencing on a real control plane: the operator replaces the pod of a node gone NotReady only the fencing
seconds after its decision (``fencedUntil`` in the slot and in the fault's history entry), and its lease
endpoint tells that pod's agent, with the pod's own bound token checked by the API server, that it is gone.
(kwok pods run no agent: the agent's side is proven by tests/integration/agent/test_agent_fencing.py.)"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import ROOT, Scenario, pod_names

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]

CCE_JOB = ROOT / "examples" / "jobs" / "cce-horovod-elastic.yaml"
JOB = "test-horovod-elastic"
LAUNCHER = f"{JOB}-launcher-0"
TRAINERS = [f"{JOB}-trainer-{i}" for i in range(3)]
FENCE = 20.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _renew(url: str, token: str) -> int:
    request = urllib.request.Request(url, b"", {"Authorization": f"Bearer {token}"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _slot(s: Scenario, name: str) -> dict:
    return next(p for p in s.job("aitrainingjob", JOB)["status"]["pods"] if p["name"] == name)


def test_a_pod_of_a_node_gone_not_ready_is_replaced_only_after_the_fencing_seconds(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    port = _free_port()
    lease = f"http://127.0.0.1:{port}/v1/agent-lease"
    s = Scenario(kube_cluster, tmp_path, 7, "default", "", None, None)
    s.operator.extra_args = [
        "--agent-report-port", str(port),
        "--agent-report-url", f"http://127.0.0.1:{port}/v1/agent-report",
        "--fence-seconds", f"{FENCE:g}",
    ]  # fmt: skip
    s.set_up()
    try:
        s.kubectl("apply", "-f", str(CCE_JOB))
        s.wait("a launcher and 3 trainers running", lambda: pod_names(s.pods()) == [LAUNCHER, *TRAINERS])
        s.wait_job("aitrainingjob", JOB, "job Running", lambda st: st.get("phase") == "Running")
        victim = TRAINERS[1]
        pod = next(p for p in s.pods() if p["metadata"]["name"] == victim)
        node, uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
        token = kube_cluster.kubectl(
            "-n", "default", "create", "token", "default", "--audience", "trainguard",
            "--bound-object-kind", "Pod", "--bound-object-name", victim, "--bound-object-uid", uid,
        ).strip()  # fmt: skip
        assert s.wait("the operator's lease endpoint", lambda: _renew(lease, token) == 200, 30)
        survivor = next(p for p in s.pods() if p["metadata"]["name"] == TRAINERS[0])
        survivor_token = kube_cluster.kubectl(
            "-n", "default", "create", "token", "default", "--audience", "trainguard",
            "--bound-object-kind", "Pod", "--bound-object-name", TRAINERS[0],
            "--bound-object-uid", survivor["metadata"]["uid"],
        ).strip()  # fmt: skip

        s.node_down(node)
        # The agent is told at once that its pod is gone (on a NotReady node, then deleted: 410, or 401 once
        # the API server refuses the deleted pod's token); a pod elsewhere renews on.
        assert s.wait("the lost pod's lease refused", lambda: _renew(lease, token) in (401, 410), 30)
        assert _renew(lease, survivor_token) == 200
        fenced_until = s.wait("the decision", lambda: _slot(s, victim).get("fencedUntil"), 60)
        decided = next(
            h
            for h in s.job("aitrainingjob", JOB)["status"]["history"]
            if h["kind"] == "fault" and h["pod"] == victim
        )
        assert decided["fault"] == "NodeNotReady"
        assert decided["fencedUntil"] == fenced_until
        assert fenced_until - decided["at"] == pytest.approx(FENCE, abs=1.0)
        # The old pod goes at once (no kubelet will confirm its end); its replacement not before fencedUntil.
        s.wait("the old pod removed", lambda: all(p["metadata"]["uid"] != uid for p in s.pods()), 30)
        created: list[float] = []

        def replaced() -> bool:
            now = time.time()
            if any(p["metadata"]["name"] == victim for p in s.pods()):
                created.append(now)
            return bool(created)

        s.wait("the replacement created", replaced, FENCE + 60)
        assert created[0] >= fenced_until - 0.5, (created[0], fenced_until)
        events = kube_cluster.get_json(
            "get", "events", "-n", "default", "--field-selector", "reason=FencingWait"
        )
        assert [e["involvedObject"]["name"] for e in events["items"]] == [victim]
        s.wait(
            "the replacement running elsewhere",
            lambda: _slot(s, victim)["phase"] == "Running" and _slot(s, victim)["node"] != node,
            60,
        )
        # The replacement's agent renews; the old one's token, bound to a pod that is no more, never again.
        new = next(p for p in s.pods() if p["metadata"]["name"] == victim)
        new_token = kube_cluster.kubectl(
            "-n", "default", "create", "token", "default", "--audience", "trainguard",
            "--bound-object-kind", "Pod", "--bound-object-name", victim, "--bound-object-uid", new["metadata"]["uid"],
        ).strip()  # fmt: skip
        assert s.wait("the replacement's lease renewed", lambda: _renew(lease, new_token) == 200, 30)
        assert _renew(lease, token) == 401
    finally:
        s.tear_down()
