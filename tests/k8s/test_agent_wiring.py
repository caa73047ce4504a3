"""The agent inside operator pods: the job's hang settings reach it, and its final report comes back.

Pure manifest and observation checks; no cluster needed (kwok pods run no processes, so the agent's part in
a real container is proven by the agent's own integration tests)."""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path

import pytest

from trainguard.api.load import load_jobs, load_object
from trainguard.backends.k8s import agentreports, manifests
from trainguard.backends.k8s.kinds import AITRAININGJOB
from trainguard.backends.k8s.observe import observed_pod
from trainguard.controller.reports import LiveRound, WorkerRestart
from trainguard.controller.status import LiveOrigin
from trainguard.policy.fencing import Fencing

from .launches import env_of, launch, pod_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
CCE_JOB = EXAMPLES / "cce-horovod-elastic.yaml"


def _command(overlays: list[Path]) -> list[str]:
    job = load_jobs(CCE_JOB, overlays)[0].job
    pod = manifests.pod(
        AITRAININGJOB, job, launch(job, "trainer", 0, {"launcher": 1, "trainer": 3}), manifests.PodSettings()
    )
    container = pod["spec"]["containers"][0]
    # The agent writes its final report where the kubelet reads the message: the API server's default path (not
    # sent: a field sent is a managed field kept on every write of the pod).
    assert container.get("terminationMessagePath", "/dev/termination-log") == "/dev/termination-log"
    return list(container["command"])


def test_without_hang_handling_the_agent_gets_the_pods_grace_period(tmp_path: Path) -> None:
    command = _command([])
    agent_end = command.index("--")
    assert command[:2] == [
        "/trainguard/bin/trainguard-entry",
        "run",
    ]  # the agent, delivered: the image needs only python3
    # The trainer's terminationGracePeriodSeconds; the release file a Horovod job's pods watch; then the
    # variables the agent sets for the command (trainguard's own, kept out of the pod's env).
    options = [option for option in command[2:agent_end] if not option.startswith("--env=")]
    assert options == ["--grace", "300", "--release-file", manifests.RELEASE_FILE]
    carried = [option.split("=")[1] for option in command[2:agent_end] if option.startswith("--env=")]
    assert carried == [
        "TRAINGUARD_GENERATION",
        "TRAINGUARD_RDZV_ENDPOINT",
        "TRAINGUARD_FAULT_CHECK",
        "TRAINGUARD_SNAPSHOT_DIR",
    ]
    assert command[agent_end + 1 :] == ["/bin/bash", "-c", "/usr/sbin/sshd && sleep infinity"]


def test_hang_retry_turns_on_detection_and_restart_in_place_in_the_pod(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay.json"
    overlay.write_text(
        json.dumps({"kind": "job", "metadata": {"annotations": {"fault-tolerance/hang-retry": "true"}}})
    )
    command = _command([overlay])
    options = command[2 : command.index("--")]
    assert options[options.index("--hang-timeout") + 1] == "1800"
    assert options[options.index("--max-consecutive") + 1] == "3"


def _pod(terminated: dict[str, object]) -> dict[str, object]:
    return {
        "metadata": {"name": "j-trainer-0", "labels": {
            "trainguard.io/role": "trainer", "trainguard.io/index": "0", "trainguard.io/generation": "1",
        }},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": terminated}}]},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (json.dumps({"event": "gave-up", "reason": "Hang", "exit_code": 137}), "Hang"),
        (json.dumps({"event": "exited", "exit_code": 137, "signal": "SIGKILL"}), None),
        ("not json {", None),
        (None, None),
    ],
)
def test_the_agents_termination_message_tells_a_hang_from_a_kill(
    message: str | None, reason: str | None
) -> None:
    terminated: dict[str, object] = {"exitCode": 137, "reason": "Error"}
    if message is not None:
        terminated["message"] = message
    observed = observed_pod(_pod(terminated))
    assert (observed.exit_code, observed.reason) == (137, reason)


def _running(annotations: dict[str, str]) -> dict[str, object]:
    pod = _pod({})
    pod["metadata"]["annotations"] = annotations  # type: ignore[index]
    pod["status"] = {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]}
    return pod


def _summary(**fields: object) -> str:
    return json.dumps({"attempt": 1, "hangs": 0, "inPlaceRestarts": 0, **fields})


@pytest.mark.parametrize(
    ("annotations", "in_place", "hung", "restarts", "first"),
    [
        ({}, None, None, (), 0),
        # Only restarts in place that the controller answered (its annotation) count as done.
        ({manifests.ANNOTATION_IN_PLACE: "1"}, 1, False, (), 0),
        ({manifests.ANNOTATION_AGENT_REPORT: _summary(hangs=1, inPlaceRestarts=1)}, 0, True, (), 0),
        (
            {
                manifests.ANNOTATION_AGENT_REPORT: _summary(hangs=1, inPlaceRestarts=1),
                manifests.ANNOTATION_IN_PLACE: "1",
            },
            1,
            False,
            (),
            0,
        ),
        (
            {
                manifests.ANNOTATION_AGENT_REPORT: _summary(
                    workerRestarts=[
                        {
                            "at": 5.0,
                            "exitCode": 137,
                            "rank": 1,
                            "failed": 1,
                            "restartsLeft": 2,
                            "maxRestarts": 3,
                        },
                        {"at": "later", "exitCode": 1},  # no time: left out
                        {"at": 6.0, "exitCode": True},  # no exit code: left out
                    ],
                    workerRestartsFrom=4,
                )
            },
            0,
            False,
            (WorkerRestart(5.0, 137, rank=1, failed=1, restarts_left=2, max_restarts=3),),
            4,
        ),
        # Not a summary at all: read as no word from the agent.
        ({manifests.ANNOTATION_AGENT_REPORT: "[1, 2]"}, None, None, (), 0),
        ({manifests.ANNOTATION_AGENT_REPORT: "{not json"}, None, None, (), 0),
    ],
)
def test_the_agents_summary_in_the_pods_annotation_is_read_field_by_field(
    annotations: dict[str, str],
    in_place: int | None,
    hung: bool | None,
    restarts: tuple[WorkerRestart, ...],
    first: int,
) -> None:
    agent = observed_pod(_running(annotations)).agent
    if in_place is None:
        assert agent is None
        return
    assert agent is not None
    assert (agent.in_place_restarts, agent.hung) == (in_place, hung)
    assert (agent.worker_restarts, agent.worker_restarts_from) == (restarts, first)


def test_the_live_rounds_in_the_pods_annotation_are_read_field_by_field() -> None:
    rounds = [
        {"at": 5.0, "round": 2, "worldSize": 3, "step": 40, "origin": "peer", "rank": 0, "seconds": 0.3,
         "cause": "RuntimeError: Connection closed by peer"},
        {"at": "later", "round": 3},  # no time: left out
    ]  # fmt: skip
    annotation = _summary(liveRounds=rounds, liveRoundsFrom=2, liveUnused=True)
    agent = observed_pod(_running({manifests.ANNOTATION_AGENT_REPORT: annotation})).agent
    assert agent is not None
    assert agent.live_rounds == (
        LiveRound(5.0, 2, world_size=3, step=40, origin=LiveOrigin.PEER, rank=0, seconds=0.3,
                  cause="RuntimeError: Connection closed by peer"),
    )  # fmt: skip
    assert (agent.live_rounds_from, agent.live_unused) == (2, True)


def test_with_a_report_url_every_replica_reports_with_a_token_for_the_operator_only() -> None:
    job = load_jobs(CCE_JOB)[0].job
    url = "http://tg-agent-reports.tg.svc:8081/v1/agent-report"
    pod = manifests.pod(
        AITRAININGJOB,
        job,
        launch(job, "trainer", 0, {"launcher": 1, "trainer": 3}),
        manifests.PodSettings(report_url=url),
    )
    container = pod["spec"]["containers"][0]
    options = container["command"][2 : container["command"].index("--")]
    assert options[options.index("--report-url") + 1] == url
    assert options[options.index("--report-token") + 1] == manifests.REPORT_TOKEN_FILE
    token = pod_file(pod, manifests.REPORT_TOKEN_FILE)
    assert token == {"audience": "trainguard", "expirationSeconds": 3600, "path": "token"}
    # Without one, nothing of it.
    plain = manifests.pod(
        AITRAININGJOB, job, launch(job, "trainer", 0, {"launcher": 1, "trainer": 3}), manifests.PodSettings()
    )
    assert "--report-url" not in plain["spec"]["containers"][0]["command"]
    assert pod_file(plain, manifests.REPORT_TOKEN_FILE) is None


@pytest.mark.parametrize(
    ("report_url", "fencing", "bound"),
    [
        ("http://tg.svc:8081/v1/agent-report", Fencing(120.0), "90"),
        ("http://tg.svc:8081/v1/agent-report", Fencing(40.0), "30"),
        ("http://tg.svc:8081/v1/agent-report", None, None),  # --fence-seconds 0
        (None, Fencing(120.0), None),  # no endpoint to renew a lease at: no fencing either
    ],
)
def test_with_fencing_every_replicas_agent_renews_its_lease_beside_the_reports_and_gets_its_bound(
    report_url: str | None, fencing: Fencing | None, bound: str | None
) -> None:
    job = load_jobs(CCE_JOB)[0].job
    settings = manifests.PodSettings(report_url=report_url, fencing=fencing)
    pod = manifests.pod(
        AITRAININGJOB, job, launch(job, "trainer", 0, {"launcher": 1, "trainer": 3}), settings
    )
    command = pod["spec"]["containers"][0]["command"]
    options = command[2 : command.index("--")]
    if bound is None:
        assert "--fence-after" not in options
        assert "--lease-url" not in options
        return
    assert options[options.index("--fence-after") + 1] == bound
    assert options[options.index("--lease-url") + 1] == "http://tg.svc:8081/v1/agent-lease"
    assert options[options.index("--report-token") + 1] == manifests.REPORT_TOKEN_FILE


def test_every_replica_gets_shared_memory_for_snapshots_unless_it_names_its_own() -> None:
    job = load_jobs(CCE_JOB)[0].job
    pod = manifests.pod(
        AITRAININGJOB, job, launch(job, "trainer", 0, {"launcher": 1, "trainer": 3}), manifests.PodSettings()
    )
    container = pod["spec"]["containers"][0]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "trainguard-snapshots"]
    assert volume["emptyDir"] == {"medium": "Memory"}
    assert {"name": "trainguard-snapshots", "mountPath": manifests.SNAPSHOT_DIR} in container["volumeMounts"]
    assert env_of(pod)["TRAINGUARD_SNAPSHOT_DIR"] == manifests.SNAPSHOT_DIR
    assert all(item["name"] != "TRAINGUARD_SNAPSHOT_DIR" for item in container["env"])  # the agent sets it
    # A container that names its own directory keeps it, and gets no volume of ours.
    own = job.to_dict()
    trainer = own["spec"]["replicaSpecs"]["trainer"]["template"]["spec"]["containers"][0]
    trainer["env"] = [*(trainer.get("env") or []), {"name": "TRAINGUARD_SNAPSHOT_DIR", "value": "/dev/shm/x"}]
    reloaded = load_object(own, "test")
    pod = manifests.pod(
        AITRAININGJOB,
        reloaded.job,
        launch(reloaded.job, "trainer", 0, {"launcher": 1, "trainer": 3}),
        manifests.PodSettings(),
    )
    assert all(v["name"] != "trainguard-snapshots" for v in pod["spec"]["volumes"])
    env = pod["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "TRAINGUARD_SNAPSHOT_DIR"] == ["/dev/shm/x"]
    assert env_of(pod)["TRAINGUARD_SNAPSHOT_DIR"] == "/dev/shm/x"


def _lease_pod(uid: str = "u1", ours: bool = True, node: str = "n1") -> dict[str, object]:
    labels = {"trainguard.io/job": "job", "trainguard.io/role": "worker", "trainguard.io/index": "0",
              "trainguard.io/generation": "1"}  # fmt: skip
    return {
        "metadata": {"name": "job-worker-0", "namespace": "ns", "uid": uid, "labels": labels if ours else {}},
        "spec": {"nodeName": node},
    }


@pytest.mark.parametrize(
    ("pod", "node_ready", "gone"),
    [
        (_lease_pod(), True, None),
        (_lease_pod(), None, None),  # a node the operator does not know: unknown is not NotReady
        (_lease_pod(ours=False), True, "is no pod of a training job"),
        (_lease_pod(), False, "is on node n1, which is not Ready: the operator replaces it"),
    ],
)
def test_a_lease_is_renewed_only_for_a_pod_of_a_job_on_a_node_not_known_lost(
    pod: dict[str, object], node_ready: bool | None, gone: str | None
) -> None:
    assert agentreports.gone(pod, node_ready) == gone


class _Reviews:
    """The API server's TokenReviews, as the endpoint sees them: the token's pod, while ``accepted``."""

    def __init__(self) -> None:
        self.accepted = True
        self.asked = 0

    def create(self, path: str, body: dict[str, object]) -> dict[str, object]:
        self.asked += 1
        if not self.accepted:
            return {"status": {"authenticated": False}}
        user = {
            "username": "system:serviceaccount:ns:default",
            "extra": {
                "authentication.kubernetes.io/pod-name": ["job-worker-0"],
                "authentication.kubernetes.io/pod-uid": ["u1"],
            },
        }
        return {"status": {"authenticated": True, "audiences": ["trainguard"], "user": user}}


class _Cache:
    def __init__(self, objects: dict[tuple[str, str], dict[str, object]], synced: bool = True) -> None:
        self.objects = objects
        self.synced = threading.Event()
        if synced:
            self.synced.set()

    def get(self, namespace: str, name: str) -> dict[str, object] | None:
        return self.objects.get((namespace, name))


def _node(ready: str) -> dict[str, object]:
    return {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": ready}]}}


@pytest.mark.parametrize(
    ("cached", "ready", "accepted", "synced", "answer"),
    [
        ("u1", "True", True, True, 200),
        ("u1", "False", True, True, 410),  # on a NotReady node: the operator replaces it
        (None, "True", True, True, 503),  # not in the cache yet (a pod just created): ask again
        (None, "True", False, True, 401),  # deleted: the API server refuses its token now
        ("u0", "True", True, True, 503),  # the cache still has the previous pod of the name: behind
        ("u2", "True", False, True, 401),  # a newer pod of the name: this one's token is refused
        ("u1", "True", True, False, 503),  # an operator that has not read the cluster yet never says gone
    ],
)
def test_the_lease_answer(cached: str | None, ready: str, accepted: bool, synced: bool, answer: int) -> None:
    reviews = _Reviews()
    pods = {("ns", "job-worker-0"): _lease_pod(uid=cached)} if cached else {}
    endpoint = agentreports.AgentReports(
        reviews,  # type: ignore[arg-type]
        _Cache(pods, synced),  # type: ignore[arg-type]
        nodes=_Cache({("", "n1"): _node(ready)}),  # type: ignore[arg-type]
    )
    with contextlib.suppress(agentreports.Rejected):
        endpoint.renew("Bearer token")  # the token reviewed once, and the review cached
    reviews.accepted = accepted
    try:
        endpoint.renew("Bearer token")
        status = 200
    except agentreports.Rejected as rejected:
        status = int(rejected.status)
    assert status == answer
