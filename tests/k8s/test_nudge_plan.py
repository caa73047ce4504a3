"""Which survivors of a torchrun job the operator nudges after a failure, and when (``backends/k8s/nudge.py``);
and the pods' wiring for it (the agent's ``--nudge-file`` on a downwardAPI projection of the annotation).
Pure: no cluster (tests/k8s/test_operator_pytorch.py checks the annotations on a real one)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.api import TrainingJob
from trainguard.api.load import load_object
from trainguard.backends.k8s import manifests
from trainguard.backends.k8s.kinds import NATIVE
from trainguard.backends.k8s.nudge import (
    FORGET_AFTER_SECONDS,
    NUDGE_AFTER_SECONDS,
    Nudge,
    failure_token,
    plan,
)
from trainguard.controller.backend import LaunchPod
from trainguard.controller.status import HistoryEntry

Obj = dict[str, Any]
T0 = 1_800_000_000.0  # the failure


def _job(command: list[str], framework: str = "pytorch") -> TrainingJob:
    obj = {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "el", "namespace": "team-a", "uid": "u-1"},
        "spec": {
            "frameworkType": framework,
            "replicaSpecs": {
                "worker": {
                    "replicas": 3,
                    "template": {"spec": {"containers": [{"name": "m", "image": "i", "command": command}]}},
                },
                # A role whose command is no torchrun's joins no rendezvous and is never nudged.
                "sidecar": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "m", "image": "i", "command": ["sleep"]}]}},
                },
            },
        },
    }
    return load_object(obj, "test").job


TORCH = _job(["python", "train.py"])


def _fault(pod: str = "el-worker-1", at: float = T0, seq: int = 1, **fields: Any) -> HistoryEntry:
    values: dict[str, Any] = {"fault": "Exited", "exit_code": 1, **fields}
    return HistoryEntry(seq=seq, at=at, kind="fault", pod=pod, action="RestartPod", reason="r", **values)


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(
    name: str,
    created: float = T0 - 100,
    phase: str = "Running",
    nudge: str | None = None,
    deleting: bool = False,
) -> Obj:
    meta: Obj = {"name": name, "creationTimestamp": _stamp(created), "annotations": {}}
    if nudge is not None:
        meta["annotations"][manifests.ANNOTATION_NUDGE] = nudge
    if deleting:
        meta["deletionTimestamp"] = _stamp(created + 1)
    return {"metadata": meta, "status": {"phase": phase}}


SURVIVORS = [_pod("el-worker-0"), _pod("el-worker-1"), _pod("el-worker-2"), _pod("el-sidecar-0")]


def test_a_failure_old_enough_nudges_the_other_running_torchrun_pods_created_before_it() -> None:
    nudge, wake = plan(TORCH, [_fault()], SURVIVORS, T0 + NUDGE_AFTER_SECONDS)

    assert nudge == Nudge("el-worker-1", f"el-worker-1#1 {T0:.3f}", ("el-worker-0", "el-worker-2"))
    assert wake is None


def test_a_young_failure_is_not_nudged_yet_and_says_when_to_look_again() -> None:
    nudge, wake = plan(TORCH, [_fault()], SURVIVORS, T0 + 1)

    assert nudge is None
    assert wake == T0 + NUDGE_AFTER_SECONDS


@pytest.mark.parametrize(
    ("entry", "nudged"),
    [
        (_fault(), True),
        (_fault(fault="OOMKilled", exit_code=137), True),
        (_fault(fault="NodeNotReady", exit_code=None), True),
        (_fault(fault="PodForceDeleted", exit_code=None), True),
        (_fault(exit_code=0), False),
        (_fault(fault="PodEvicted", exit_code=None), False),  # stopped gracefully: peers see it go
        (_fault(fault="Hang", exit_code=None), False),  # restarted in place by its own agent
        (_fault(pod="el-sidecar-0"), False),  # no torchrun role
        (_fault(at=T0 - FORGET_AFTER_SECONDS), False),  # too old to matter now
        (HistoryEntry(seq=1, at=T0, kind="scale", action="Scale", reason="r"), False),
    ],
    ids=["exit", "oom", "node", "force-deleted", "exit-0", "evicted", "hang", "other-role", "old", "scale"],
)
def test_which_faults_nudge(entry: HistoryEntry, nudged: bool) -> None:
    nudge, _ = plan(TORCH, [entry], SURVIVORS, T0 + NUDGE_AFTER_SECONDS)

    assert (nudge is not None) is nudged


@pytest.mark.parametrize(
    ("pod", "nudged"),
    [
        (_pod("el-worker-0"), True),
        (_pod("el-worker-0", created=T0 + 1), False),  # a replacement: its workers are younger
        (_pod("el-worker-0", phase="Pending"), False),
        (_pod("el-worker-0", deleting=True), False),
        (_pod("el-worker-0", nudge=f"el-worker-1#1 {T0:.3f}"), False),  # has it already
        (_pod("el-worker-0", nudge="el-worker-2#0 1.000"), True),  # an older failure's token
        (_pod("el-worker-1"), False),  # the failed pod itself
        (_pod("other-worker-0"), False),  # not the job's
    ],
    ids=["survivor", "younger", "pending", "deleting", "has-token", "old-token", "failed-pod", "other-job"],
)
def test_which_pods_are_nudged(pod: Obj, nudged: bool) -> None:
    nudge, _ = plan(TORCH, [_fault()], [pod], T0 + NUDGE_AFTER_SECONDS)

    assert (nudge is not None and pod["metadata"]["name"] in nudge.pods) is nudged


def test_only_the_latest_due_failure_is_sent_and_a_younger_one_sets_the_wake_up() -> None:
    history = [
        _fault("el-worker-1", at=T0 - 30, seq=1),
        _fault("el-worker-2", at=T0 - 10, seq=2),
        _fault("el-worker-2", at=T0 - 2, seq=3),
    ]
    nudge, wake = plan(TORCH, history, SURVIVORS, T0)

    assert nudge is not None
    assert nudge.token == f"el-worker-2#2 {T0 - 10:.3f}"
    assert nudge.pods == ("el-worker-0", "el-worker-1")
    assert wake == T0 - 2 + NUDGE_AFTER_SECONDS


def test_jobs_without_torchrun_are_never_nudged() -> None:
    for job in (_job(["/bin/sh", "-c", "sleep 1"]), _job(["python", "train.py"], framework="horovod")):
        assert plan(job, [_fault()], SURVIVORS, T0 + NUDGE_AFTER_SECONDS) == (None, None)


@given(
    at=st.floats(min_value=T0 - 2 * FORGET_AFTER_SECONDS, max_value=T0),
    created=st.floats(min_value=T0 - 2 * FORGET_AFTER_SECONDS, max_value=T0),
)
def test_a_plan_is_idempotent_once_its_pods_carry_the_token(at: float, created: float) -> None:
    """Whatever the times: a nudged pod was created before the failure, a failure is sent only in its window,
    and applying the plan's annotation makes the next plan send nothing."""
    pods = [_pod(f"el-worker-{i}", created=created) for i in (0, 2)]
    nudge, _ = plan(TORCH, [_fault(at=at)], pods, T0)
    if nudge is None:
        return
    assert NUDGE_AFTER_SECONDS <= T0 - at < FORGET_AFTER_SECONDS
    assert int(created) < at
    for pod in pods:
        if pod["metadata"]["name"] in nudge.pods:
            pod["metadata"]["annotations"][manifests.ANNOTATION_NUDGE] = nudge.token
    assert plan(TORCH, [_fault(at=at)], pods, T0)[0] is None


def test_the_token_is_the_agents_nudge_file_format() -> None:
    token, when = failure_token(_fault(seq=7, at=T0 + 0.25)).split(" ")
    assert token == "el-worker-1#7"
    assert float(when) == T0 + 0.25


def test_torchrun_pods_read_their_nudge_annotation_through_a_downward_api_file() -> None:
    launch = LaunchPod(
        key="k", pod="el-worker-0", role="worker", index=0, generation=1, restart_count=0, reason="start"
    )
    pod = manifests.pod(NATIVE, TORCH, launch, None, {"worker": 3})
    container = pod["spec"]["containers"][0]
    command = container["command"]
    assert command[command.index("--nudge-file") + 1] == manifests.NUDGE_FILE
    assert command.index("--nudge-file") < command.index("--")
    (volume,) = [v for v in pod["spec"]["volumes"] if "downwardAPI" in v]
    (item,) = volume["downwardAPI"]["items"]
    assert item["fieldRef"]["fieldPath"] == f"metadata.annotations['{manifests.ANNOTATION_NUDGE}']"
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert f"{mount['mountPath']}/{item['path']}" == manifests.NUDGE_FILE

    plain = LaunchPod(
        key="k", pod="el-sidecar-0", role="sidecar", index=0, generation=1, restart_count=0, reason="start"
    )
    sidecar = manifests.pod(NATIVE, TORCH, plain, None, {"worker": 3, "sidecar": 1})
    assert "volumes" not in sidecar["spec"]
    assert "--nudge-file" not in sidecar["spec"]["containers"][0]["command"]
