"""The operator's agent-report endpoint against a real kube-apiserver: an agent speaks for its own pod only.

A pod-bound token for the audience ``trainguard`` (what the kubelet projects into every replica, made here
with the TokenRequest API, ``kubectl create token --bound-object-kind Pod``) gets the agent's summary into its
own pod's annotation; every other request is refused with the status that says why, and changes nothing."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.k8s.cluster import KubeCluster
from tests.unit.agent.waiting import wait_until
from trainguard.backends.k8s import agentreports, manifests, metadata
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import Kube
from trainguard.backends.k8s.observe import observed_pod

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(120)]

NAMESPACE = "agent-reports"
OURS, OTHER = "job-worker-0", "someone-else"
SUMMARY = {
    "attempt": 2,
    "hangs": 1,
    "inPlaceRestarts": 1,
    "workerRestarts": [
        {"at": 5.0, "exitCode": 137, "rank": 0, "failed": 1, "restartsLeft": 2, "maxRestarts": 3}
    ],
    "workerRestartsFrom": 0,
    "liveRounds": [{"at": 6.0, "round": 2, "worldSize": 2, "step": 9, "origin": "live", "rank": 0}],
    "liveRoundsFrom": 0,
    "liveUnused": False,
    # The fault tolerance check's: the latest check and the latest that failed, and each rank's work per step.
    "checks": 2,
    "lastCheck": {
        "phase": "periodic", "at": 7.0, "seconds": 0.01, "verdict": "hardware",
        "items": [{"name": "gpu.ecc", "verdict": "hardware", "value": 2.0, "threshold": 0.0}],
    },
    "failedCheck": {
        "phase": "periodic", "at": 7.0, "seconds": 0.01, "verdict": "hardware",
        "items": [{"name": "gpu.ecc", "verdict": "hardware", "value": 2.0, "threshold": 0.0}],
    },
    "ranks": [{"rank": 0, "steps": 20, "busySeconds": 0.1, "stepSeconds": 0.2}],
    "suspectedHang": {"signal": "io", "idleSeconds": 1800.5},
    "spares": {"ready": 1, "wanted": 2},
    "agentMissing": None,
}  # fmt: skip


def _pod(name: str, ours: bool) -> dict[str, object]:
    labels = {metadata.LABEL_JOB: "job", metadata.LABEL_ROLE: "worker", metadata.LABEL_INDEX: "0",
              metadata.LABEL_GENERATION: "1"} if ours else {metadata.LABEL_JOB: "job"}  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], "nodeName": "nowhere"},
    }


@dataclass
class Endpoint:
    cluster: KubeCluster
    url: str
    pods: Cache

    def token(self, pod: str, audience: str = "trainguard") -> str:
        uid = self.cluster.kubectl("-n", NAMESPACE, "get", "pod", pod, "-o", "jsonpath={.metadata.uid}")
        return self.cluster.kubectl(
            "-n", NAMESPACE, "create", "token", "default", "--audience", audience,
            "--bound-object-kind", "Pod", "--bound-object-name", pod, "--bound-object-uid", uid,
        ).strip()  # fmt: skip

    def post(self, token: str | None, body: object, path: str = agentreports.PATH) -> int:
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(
            self.url.replace(agentreports.PATH, path), data, headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)

    def annotation(self, pod: str) -> str | None:
        found = json.loads(self.cluster.kubectl("-n", NAMESPACE, "get", "pod", pod, "-o", "json"))
        return (found["metadata"].get("annotations") or {}).get(manifests.ANNOTATION_AGENT_REPORT)


@pytest.fixture(scope="module")
def endpoint(kube_cluster: KubeCluster) -> Iterator[Endpoint]:
    kube_cluster.kubectl_result("delete", "namespace", NAMESPACE, "--wait=true")
    kube_cluster.kubectl("create", "namespace", NAMESPACE)
    wait_until(
        lambda: (
            "default" in kube_cluster.kubectl_result("-n", NAMESPACE, "get", "serviceaccount", "-o", "name")
        ),
        "the namespace's default ServiceAccount",
        30,
    )
    for name, ours in ((OURS, True), (OTHER, False)):
        kube_cluster.kubectl("apply", "-f", "-", input=json.dumps(_pod(name, ours)))
    kube = Kube(str(kube_cluster.kubeconfig))
    pods = Cache(
        kube,
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        lambda obj, now: None,
        label_selector=metadata.LABEL_JOB,
    )
    pods.start()
    wait_until(pods.synced.is_set, "the pod cache", 30)
    wait_until(lambda: pods.get(NAMESPACE, OURS) and pods.get(NAMESPACE, OTHER), "both pods in the cache", 30)
    server, url = agentreports.serve(agentreports.AgentReports(kube, pods), 0, "127.0.0.1")
    yield Endpoint(kube_cluster, url, pods)
    server.shutdown()
    server.server_close()
    pods.stop()
    kube.close()
    kube_cluster.kubectl_result("delete", "namespace", NAMESPACE, "--wait=false")


def test_a_pod_bound_token_gets_the_summary_into_its_own_pods_annotation(endpoint: Endpoint) -> None:
    assert endpoint.post(endpoint.token(OURS), {"report": SUMMARY}) == 204
    assert json.loads(endpoint.annotation(OURS) or "{}") == SUMMARY
    # What the controller reads from it: the hang is not answered yet, the restart inside the pod is there.
    wait_until(
        lambda: (
            manifests.ANNOTATION_AGENT_REPORT
            in (endpoint.pods.get(NAMESPACE, OURS) or {}).get("metadata", {}).get("annotations", {})
        ),
        "the annotation in the operator's cache",
        10,
    )
    agent = observed_pod(endpoint.pods.get(NAMESPACE, OURS)).agent  # type: ignore[arg-type]
    assert agent is not None
    assert (agent.hung, agent.in_place_restarts, [r.exit_code for r in agent.worker_restarts]) == (
        True,
        0,
        [137],
    )


def test_the_entrys_word_that_the_agent_is_missing_reaches_the_controller(endpoint: Endpoint) -> None:
    """What ``trainguard-entry run`` POSTs in the agent's place where the image has no python3."""
    why = "the image has no python3 (PATH=/bin); trainguard's agent needs Python 3.8 or later"
    assert endpoint.post(endpoint.token(OURS), {"report": {"agentMissing": why}}) == 204

    def seen() -> str | None:
        pod = endpoint.pods.get(NAMESPACE, OURS)
        return None if pod is None else observed_pod(pod).agent_missing

    wait_until(lambda: seen() == why, "the entry's word in the operator's cache", 10)


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("no token", 401),
        ("a token for another audience", 401),
        ("a token of a pod of no job", 403),
        ("a body that is not JSON", 400),
        ("JSON that is no summary", 400),
        ("another path", 404),
    ],
)
def test_every_other_request_is_refused_and_changes_nothing(
    endpoint: Endpoint, case: str, status: int
) -> None:
    before = endpoint.annotation(OURS), endpoint.annotation(OTHER)
    good = {"report": {**SUMMARY, "hangs": 9}}
    answer = {
        "no token": lambda: endpoint.post(None, good),
        "a token for another audience": lambda: endpoint.post(
            endpoint.token(OURS, audience="elsewhere"), good
        ),
        "a token of a pod of no job": lambda: endpoint.post(endpoint.token(OTHER), good),
        "a body that is not JSON": lambda: endpoint.post(endpoint.token(OURS), b"{not json"),
        "JSON that is no summary": lambda: endpoint.post(endpoint.token(OURS), {"report": [1, 2]}),
        "another path": lambda: endpoint.post(endpoint.token(OURS), good, path="/v1/other"),
    }[case]()
    assert answer == status
    assert (endpoint.annotation(OURS), endpoint.annotation(OTHER)) == before
