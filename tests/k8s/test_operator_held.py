"""A job larger than the operator runs (``held.MAX_JOB_PODS``, counted at its largest) is accepted and held:
Pending with reason ``TooLarge``, a condition and one Warning event that name the number, the limit and the
fix, no pod and no retry; edited down, it runs.

The size and the decision are tables (no cluster); one reconcile runs against a fake API server; the last
test submits such a job to the test cluster, then edits it down."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import Scenario, pod_names, scenario
from trainguard.api import TrainingJob
from trainguard.backends.k8s import held
from trainguard.backends.k8s.held import MAX_JOB_PODS
from trainguard.backends.k8s.kinds import AITRAININGJOB, NATIVE, PYTORCHJOB, JobKind
from trainguard.backends.k8s.operator import Operator
from trainguard.backends.k8s.status import read_status, status_document
from trainguard.controller import JobPhase
from trainguard.controller.admission import STATUS_OBJECT, Hold, PodLimit, admit, count, is_held, oversize

Obj = dict[str, Any]
TJ = "trainingjob"
HELD_REASON = STATUS_OBJECT.reason
TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "img", "command": ["python", "train.py"]}]}}


def _resource(name: str = "big", **roles: Obj) -> Obj:
    return _manifest(name, roles or {"worker": {"replicas": 1}})


def _manifest(name: str, specs: dict[str, Obj]) -> Obj:
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {
            "frameworkType": "generic",
            "replicaSpecs": {role: {**spec, "template": TEMPLATE} for role, spec in specs.items()},
        },
    }


def _job(**roles: Obj) -> TrainingJob:
    return TrainingJob.model_validate(_manifest("big", roles))


def _too_large(job: TrainingJob, kind: JobKind, limit: int = MAX_JOB_PODS) -> str | None:
    """The engine's decision in the operator's words: why it does not run the job, or None when it fits."""
    over = oversize(job, PodLimit(limit, STATUS_OBJECT))
    return None if over is None else held.explain(kind, over)


def _hold(obj: Obj, limit: int) -> Hold | None:
    """The engine's admission of the resource as the operator reads it: how to hold it, or None to run it."""
    job = TrainingJob.model_validate(obj)
    limits = PodLimit(limit, STATUS_OBJECT)
    admission = admit(job, read_status(obj), limits, lambda over: held.explain(NATIVE, over), 1_000.0)
    return admission if isinstance(admission, Hold) else None


# ---- the size and the decision ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("roles", "pods"),
    [
        ({"worker": {"replicas": 8}}, 8),
        ({"launcher": {"replicas": 1}, "trainer": {"replicas": 16}}, 17),
        # An elastic role counts at maxReplicas: a scale or an HPA may take it there.
        ({"worker": {"replicas": 2, "minReplicas": 1, "maxReplicas": 5000}}, 5000),
        ({"launcher": {"replicas": 1}, "worker": {"replicas": 4, "minReplicas": 4, "maxReplicas": 64}}, 65),
        ({"worker": {"replicas": 0}}, 0),
    ],
)
def test_a_jobs_pods_are_every_role_at_its_largest(roles: dict[str, Obj], pods: int) -> None:
    assert count(_job(**roles), STATUS_OBJECT) == pods


@pytest.mark.parametrize(
    ("roles", "held_for"),
    [
        ({"worker": {"replicas": MAX_JOB_PODS}}, None),
        ({"worker": {"replicas": MAX_JOB_PODS + 1}}, f"has {MAX_JOB_PODS + 1:,} pods"),
        ({"launcher": {"replicas": 1}, "worker": {"replicas": MAX_JOB_PODS - 1}}, None),
        (
            {"launcher": {"replicas": 1}, "worker": {"replicas": MAX_JOB_PODS}},
            f"has {MAX_JOB_PODS + 1:,} pods",
        ),
        (
            {"worker": {"replicas": 2, "minReplicas": 1, "maxReplicas": 5000}},
            "can grow to 5,000 pods (worker 5,000 at maxReplicas)",
        ),
    ],
)
def test_a_job_is_held_only_past_the_limit(roles: dict[str, Obj], held_for: str | None) -> None:
    why = _too_large(_job(**roles), NATIVE)
    if held_for is None:
        assert why is None
    else:
        assert why is not None
        assert held_for in why


def test_the_message_names_the_number_the_limit_and_the_fix() -> None:
    why = _too_large(_job(launcher={"replicas": 1}, worker={"replicas": 1500}), AITRAININGJOB, limit=1000)
    assert why == (
        "job big has 1,501 pods (launcher 1, worker 1,500), and the operator runs at most 1,000 pods of a job "
        "(every pod is in the job's status, which the API server stores in one object of at most 1.5 MiB): "
        "lower spec.replicaSpecs.worker.replicas/maxReplicas to 999 or fewer, or split the job into several"
    )


def test_the_fix_of_a_job_whose_other_roles_alone_are_too_many_names_the_total() -> None:
    why = _too_large(_job(a={"replicas": 6}, b={"replicas": 6}), NATIVE, limit=5)
    assert why is not None
    assert "lower the roles' replicas/maxReplicas to 5 pods in all, or split the job into several" in why


def test_a_pytorchjob_is_told_its_own_fields() -> None:
    why = _too_large(_job(worker={"replicas": 3}), PYTORCHJOB, limit=2)
    assert why is not None
    assert "lower spec.pytorchReplicaSpecs.Worker.replicas/spec.elasticPolicy.maxReplicas to 2" in why


def test_a_new_job_past_the_limit_gets_a_pending_status_a_condition_and_a_warning() -> None:
    obj = _resource(worker={"replicas": 3})
    holding = _hold(obj, limit=2)
    assert holding is not None
    assert holding.status is not None
    assert holding.event is not None
    status = status_document(NATIVE, TrainingJob.model_validate(obj), holding.status)
    assert (status["phase"], status["reason"], status["message"]) == ("Pending", HELD_REASON, holding.message)
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in status["conditions"]] == [
        ("Pending", "True", HELD_REASON, holding.message)
    ]
    assert status["conditions"][0]["lastTransitionTime"] == "1970-01-01T00:16:40Z"
    assert status["pods"] == []
    assert status["startedAt"] is None
    assert (holding.event.type.value, holding.event.reason) == ("Warning", HELD_REASON)
    assert holding.event.key == "uid-big/held/3"  # once per size
    # Whoever reads the status (the metrics, a later reconcile) reads a job that waits.
    read = read_status({**obj, "status": status})
    assert (read.phase, read.reason, read.started_at) == (JobPhase.PENDING, HELD_REASON, None)
    shown = {**obj, "status": status}
    assert is_held(read_status(shown), STATUS_OBJECT)
    assert _hold(shown, limit=2) == Hold(holding.message, None, None)  # already held: nothing to do again


def test_a_job_that_fits_is_not_held_and_a_started_one_keeps_its_status() -> None:
    obj = _resource(worker={"replicas": 2})
    assert _hold(obj, limit=2) is None
    started = {**_resource(worker={"replicas": 3}), "status": {"phase": "Running", "startedAt": 900.0}}
    holding = _hold(started, limit=2)
    assert holding is not None
    assert holding.status is None
    assert not is_held(read_status(started), STATUS_OBJECT)
    assert holding.event is not None  # not held before: its event is sent


# ---- one reconcile, against a fake API server ---------------------------------------------------------


class _Jobs:
    def __init__(self, obj: Obj) -> None:
        self.obj = obj

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.obj

    def put(self, obj: Obj) -> None:
        self.obj = obj


class _Kube:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Obj]] = []

    def replace(self, path: str, body: Obj) -> Obj:
        self.sent.append(("replace", path, body))
        return body

    def create(self, path: str, body: Obj) -> Obj:
        self.sent.append(("create", path, body))
        return body


class _Leader:
    def is_leader(self) -> bool:
        return True


class _Shared:
    identity = "operator-test"


def _operator(obj: Obj) -> tuple[Operator, _Kube, _Jobs]:
    """An operator with what a reconcile of a held job touches: its job cache, API server, leader, clock."""
    operator = Operator.__new__(Operator)
    kube, jobs = _Kube(), _Jobs(obj)
    operator.jobs = {NATIVE.kind: jobs}  # type: ignore[dict-item]
    operator.kinds = {NATIVE.kind: NATIVE}
    operator.kube = kube  # type: ignore[assignment]
    operator.leader = _Leader()  # type: ignore[assignment]
    operator.shared = _Shared()  # type: ignore[assignment]
    operator.clock = lambda: 1_000.0
    return operator, kube, jobs


def test_a_held_job_is_written_once_and_then_left_alone() -> None:
    operator, kube, jobs = _operator(_resource(worker={"replicas": MAX_JOB_PODS + 1}))
    for _ in range(3):  # its own status write, a resync, an unrelated edit: nothing new
        operator.reconcile((NATIVE.kind, "ns", "big"))
    assert [(verb, path) for verb, path, _ in kube.sent] == [
        ("replace", "/apis/trainguard.io/v1/namespaces/ns/trainingjobs/big/status"),
        ("create", "/api/v1/namespaces/ns/events"),
    ]
    event = kube.sent[1][2]
    assert (event["type"], event["reason"], event["involvedObject"]["uid"]) == (
        "Warning",
        "TooLarge",
        "uid-big",
    )
    assert f"has {MAX_JOB_PODS + 1:,} pods" in event["message"]
    assert jobs.obj["status"]["reason"] == HELD_REASON


def test_a_started_job_edited_past_the_limit_keeps_its_status_and_gets_a_warning() -> None:
    obj = {
        **_resource(worker={"replicas": MAX_JOB_PODS + 1}),
        "status": {"phase": "Running", "startedAt": 9.0},
    }
    operator, kube, jobs = _operator(obj)
    operator.reconcile((NATIVE.kind, "ns", "big"))
    assert [verb for verb, _, _ in kube.sent] == ["create"]
    assert kube.sent[0][2]["reason"] == HELD_REASON
    assert jobs.obj["status"] == {"phase": "Running", "startedAt": 9.0}


# ---- on the test cluster ------------------------------------------------------------------------------


def _held_events(s: Scenario, name: str) -> list[Obj]:
    events = json.loads(s.kubectl("get", "events", "-o", "json"))["items"]
    return [e for e in events if e["involvedObject"].get("name") == name and e["reason"] == HELD_REASON]


@pytest.mark.k8s
@pytest.mark.timeout(300)
def test_a_job_too_large_is_held_then_runs_once_edited_down(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    too_many = MAX_JOB_PODS + 500
    with scenario(kube_cluster, tmp_path, nodes=3) as s:
        manifest = _resource("big", worker={"replicas": too_many})
        manifest["metadata"] = {"name": "big"}  # in the scenario's namespace; the API server gives the uid
        s.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        job = s.wait_job(TJ, "big", "big held", lambda st: st.get("reason") == HELD_REASON)
        status = job["status"]
        assert status["phase"] == "Pending"
        message = status["message"]
        assert f"{too_many:,} pods" in message
        assert f"at most {MAX_JOB_PODS:,} pods" in message
        assert f"lower spec.replicaSpecs.worker.replicas/maxReplicas to {MAX_JOB_PODS:,}" in message
        assert "split the job" in message
        assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
            ("Pending", "True", HELD_REASON)
        ]
        # More reconciles (a change of the resource, the operator's own write): no new write, no new event.
        version = job["metadata"]["resourceVersion"]
        s.kubectl("annotate", f"{TJ}/big", "example.com/touched=yes")
        time.sleep(3)
        assert s.job(TJ, "big")["status"] == status
        events = s.wait("the Warning event", lambda: _held_events(s, "big"))
        assert [(e["type"], e["count"], e["message"]) for e in events] == [("Warning", 1, message)]
        assert not s.pods()
        assert s.job(TJ, "big")["metadata"]["resourceVersion"] != version  # the annotation did land

        patch = {"spec": {"replicaSpecs": {"worker": {"replicas": 2}}}}
        s.kubectl("patch", f"{TJ}/big", "--type=merge", "-p", json.dumps(patch))
        job = s.wait_job(TJ, "big", "big Running", lambda st: st.get("phase") == "Running")
        assert pod_names(s.pods()) == ["big-worker-0", "big-worker-1"]
        assert job["status"]["reason"] != HELD_REASON
        assert HELD_REASON not in [c["reason"] for c in job["status"]["conditions"]]
        assert len(_held_events(s, "big")) == 1
