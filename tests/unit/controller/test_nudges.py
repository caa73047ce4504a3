"""Which survivors of a torchrun job the controller nudges after a failure, and when
(``trainguard.controller.nudges``): one ``NudgeSurvivors`` action per failure, decided from the status history
and the observation. Pure: no backend (the contract suite checks that every backend carries it out)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.api import TrainingJob
from trainguard.api.load import load_object
from trainguard.controller import (
    EmitEvent,
    JobStatus,
    NudgeSurvivors,
    Observed,
    ObservedPhase,
    ObservedPod,
    reconcile,
)
from trainguard.controller.cycle import Cycle
from trainguard.controller.nudges import FORGET_AFTER_SECONDS, NUDGE_AFTER_SECONDS, nudge_survivors
from trainguard.controller.phases import JobPhase, PodPhase
from trainguard.controller.status import HistoryEntry, PodStatus

T0 = 1_800_000_000.0  # the failure


def _job(command: list[str], framework: str = "pytorch") -> TrainingJob:
    def role(replicas: int, argv: list[str]) -> dict[str, Any]:
        return {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "m", "image": "i", "command": argv}]}},
        }

    obj = {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "el", "namespace": "team-a", "uid": "u-1"},
        # A role whose command is no torchrun's joins no rendezvous and is never nudged.
        "spec": {
            "frameworkType": framework,
            "replicaSpecs": {"worker": role(3, command), "sidecar": role(1, ["sleep"])},
        },
    }
    return load_object(obj, "test").job


TORCH = _job(["python", "train.py"])
PODS = ("el-worker-0", "el-worker-1", "el-worker-2", "el-sidecar-0")


def _fault(pod: str = "el-worker-1", at: float = T0, seq: int = 1, **fields: Any) -> HistoryEntry:
    role = pod.split("-")[1]
    values: dict[str, Any] = {"fault": "Exited", "exit_code": 1, **fields}
    return HistoryEntry(
        seq=seq, at=at, kind="fault", role=role, pod=pod, action="restart", reason="r", **values
    )


def _observed(name: str, started: float | None = T0 - 100, **fields: Any) -> ObservedPod:
    role, index = name.split("-")[1], int(name.split("-")[2])
    values: dict[str, Any] = {
        "generation": 1,
        "phase": ObservedPhase.RUNNING,
        "started_at": started,
        **fields,
    }
    return ObservedPod(name=name, role=role, index=index, **values)


def _status(history: list[HistoryEntry]) -> JobStatus:
    slots = tuple(
        PodStatus(name=name, role=name.split("-")[1], index=int(name.split("-")[2]), phase=PodPhase.RUNNING)
        for name in PODS
    )
    return JobStatus(phase=JobPhase.RUNNING, pods=slots, history=tuple(history), started_at=T0 - 200)


def _decide(
    history: list[HistoryEntry],
    pods: list[ObservedPod] | None = None,
    now: float = T0 + NUDGE_AFTER_SECONDS,
    job: TrainingJob = TORCH,
) -> tuple[list[NudgeSurvivors], float | None, Cycle]:
    observed = Observed(pods=tuple(pods if pods is not None else [_observed(name) for name in PODS]))
    cycle = Cycle.start(job, _status(history), observed, now)
    wake = nudge_survivors(cycle)
    return [a for a in cycle.actions if isinstance(a, NudgeSurvivors)], wake, cycle


def test_a_failure_old_enough_nudges_the_other_running_torchrun_pods_started_before_it() -> None:
    nudges, wake, cycle = _decide([_fault()])

    (nudge,) = nudges
    assert (nudge.failed_pod, nudge.token, nudge.failed_at) == ("el-worker-1", "el-worker-1#1", T0)
    assert nudge.pods == ("el-worker-0", "el-worker-2")
    assert wake is None
    (event,) = [a for a in cycle.actions if isinstance(a, EmitEvent) and a.reason == "NudgeSurvivors"]
    assert "el-worker-1 failed" in event.message
    assert "el-worker-0, el-worker-2" in event.message


def test_a_young_failure_is_not_nudged_yet_and_says_when_to_look_again() -> None:
    nudges, wake, _ = _decide([_fault()], now=T0 + 1)

    assert nudges == []
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
        (HistoryEntry(seq=1, at=T0, kind="scale", role="worker", action="scaleout", reason="r"), False),
    ],
    ids=["exit", "oom", "node", "force-deleted", "exit-0", "evicted", "hang", "other-role", "old", "scale"],
)
def test_which_faults_nudge(entry: HistoryEntry, nudged: bool) -> None:
    nudges, _, _ = _decide([entry])

    assert bool(nudges) is nudged


@pytest.mark.parametrize(
    ("pod", "nudged"),
    [
        (_observed("el-worker-0"), True),
        (_observed("el-worker-0", started=T0 + 1), False),  # a replacement: its workers are younger
        (_observed("el-worker-0", started=None), False),  # not started
        (_observed("el-worker-0", phase=ObservedPhase.PENDING), False),
        (_observed("el-worker-0", terminating=True), False),
        (_observed("el-worker-0", generation=0), False),  # an incarnation already replaced
        (_observed("el-worker-1"), False),  # the failed pod itself
        (_observed("el-sidecar-0"), False),  # no torchrun role
    ],
    ids=[
        "survivor",
        "younger",
        "not-started",
        "pending",
        "deleting",
        "old-incarnation",
        "failed-pod",
        "sidecar",
    ],
)
def test_which_pods_are_nudged(pod: ObservedPod, nudged: bool) -> None:
    nudges, _, _ = _decide([_fault()], [pod])

    assert (bool(nudges) and pod.name in nudges[0].pods) is nudged


def test_only_the_latest_due_failure_is_sent_and_a_younger_one_sets_the_wake_up() -> None:
    history = [
        _fault("el-worker-1", at=T0 - 30, seq=1),
        _fault("el-worker-2", at=T0 - 10, seq=2),
        _fault("el-worker-2", at=T0 - 2, seq=3),
    ]
    nudges, wake, _ = _decide(history, now=T0)

    (nudge,) = nudges
    assert (nudge.token, nudge.failed_at) == ("el-worker-2#2", T0 - 10)
    assert nudge.pods == ("el-worker-0", "el-worker-1")
    assert wake == T0 - 2 + NUDGE_AFTER_SECONDS


def test_jobs_without_torchrun_are_never_nudged() -> None:
    for job in (_job(["/bin/sh", "-c", "sleep 1"]), _job(["python", "train.py"], framework="horovod")):
        assert _decide([_fault()], job=job)[:2] == ([], None)


@given(
    at=st.floats(min_value=T0 - 2 * FORGET_AFTER_SECONDS, max_value=T0),
    started=st.floats(min_value=T0 - 2 * FORGET_AFTER_SECONDS, max_value=T0),
)
def test_a_failure_is_nudged_once_in_its_window_and_only_to_older_pods(at: float, started: float) -> None:
    """Whatever the times: a nudged pod started before the failure, a failure is sent only in its window, and
    a controller that reconciles again from the status it stored does not send it again."""
    pods = [_observed(f"el-worker-{i}", started=started) for i in (0, 2)]
    nudges, _, cycle = _decide([_fault(at=at)], pods, now=T0)
    if not nudges:
        assert not (NUDGE_AFTER_SECONDS <= T0 - at < FORGET_AFTER_SECONDS and started <= at)
        return
    assert NUDGE_AFTER_SECONDS <= T0 - at < FORGET_AFTER_SECONDS
    assert started <= at
    again = Cycle.start(
        TORCH, replace_status(_status([_fault(at=at)]), cycle), Observed(pods=tuple(pods)), T0 + 1
    )
    nudge_survivors(again)
    assert not [a for a in again.actions if isinstance(a, NudgeSurvivors)]


def replace_status(status: JobStatus, cycle: Cycle) -> JobStatus:
    return status.model_copy(update={"issued_keys": cycle.issued_keys()})


def test_reconcile_issues_the_nudge_once_and_wakes_for_it() -> None:
    """Through ``reconcile``: the wake-up it asks for is the nudge's time, and the nudge it issues then is
    stored with the status, so the next reconcile issues it no more."""
    status = _status([_fault()])
    observed = Observed(pods=tuple(replace(_observed(name), node="n1") for name in PODS))
    early = reconcile(TORCH, status, observed, T0 + 1)
    assert not [a for a in early.actions if isinstance(a, NudgeSurvivors)]
    assert early.wake_at == T0 + NUDGE_AFTER_SECONDS
    due = reconcile(TORCH, early.status, observed, early.wake_at)
    assert [a.pods for a in due.actions if isinstance(a, NudgeSurvivors)] == [("el-worker-0", "el-worker-2")]
    later = reconcile(TORCH, due.status, observed, early.wake_at + 1)
    assert not [a for a in later.actions if isinstance(a, NudgeSurvivors)]
