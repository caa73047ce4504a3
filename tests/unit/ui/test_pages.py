"""What the job pages show, from a job and its status (trainguard.ui.pages): pure, table-driven."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainguard.api.load import load_object
from trainguard.backends.local import views
from trainguard.cli.main import main
from trainguard.controller.status import FaultCheckStatus, LinkRecord
from trainguard.ui import pages
from trainguard.ui.pages import (
    PageError,
    history_label,
    job_detail,
    job_row,
    roles,
    time_lost,
    what_if_answer,
)

JOB: dict[str, Any] = {
    "apiVersion": "trainguard.io/v1",
    "kind": "TrainingJob",
    "metadata": {"name": "demo"},
    "spec": {
        "replicaSpecs": {
            "worker": {
                "replicas": 3,
                "minReplicas": 1,
                "maxReplicas": 5,
                "restartPolicy": "ExitCode",
                "template": {"spec": {"containers": [{"name": "c", "command": ["true"]}]}},
            }
        }
    },
}


def _pod(index: int, phase: str) -> dict[str, Any]:
    return {"name": f"demo-worker-{index}", "role": "worker", "index": index, "phase": phase, "restarts": 0}


def _view(**status: Any) -> dict[str, Any]:
    return {
        "kind": "TrainingJob",
        "metadata": {"creationTimestamp": "2026-11-25T10:00:00Z"},
        "status": status,
    }


@pytest.mark.parametrize(
    ("pods", "desired", "expected"),
    [
        ([], {}, {"ready": 0, "desired": 3}),
        ([_pod(0, "Running"), _pod(1, "Pending"), _pod(2, "Running")], {}, {"ready": 2, "desired": 3}),
        ([_pod(0, "Running")], {"worker": 1}, {"ready": 1, "desired": 1}),
    ],
)
def test_roles_count_running_pods_against_the_desired_within_min_and_max(pods, desired, expected) -> None:  # type: ignore[no-untyped-def]
    job = load_object(JOB, "test").job
    assert roles(job, {"pods": pods, "desired": desired}) == [
        {"name": "worker", **expected, "min": 1, "max": 5}
    ]


def test_a_row_of_the_jobs_list() -> None:
    job = load_object(JOB, "test").job
    row = job_row(job, _view(phase="Running", restartCounts={"worker": 2}, pods=[]), now=1795600800.0 + 90)
    assert (row["name"], row["phase"], row["restarts"], row["age_s"]) == ("demo", "Running", 2, 90.0)


def test_hang_restarts_are_counted_on_their_own_per_job_and_per_pod() -> None:
    """As ``get`` and ``describe`` show them: not among the restarts (relaunches)."""
    job = load_object(JOB, "test").job
    pods = [{**_pod(0, "Running"), "hangRestarts": 2}, _pod(1, "Running")]  # an older status: no count
    view = _view(phase="Running", restartCounts={"worker": 1}, hangRestartCounts={"worker": 2}, pods=pods)
    row = job_row(job, view)
    assert (row["restarts"], row["hang_restarts"]) == (1, 2)
    detail = job_detail(job, view, [], now=1795600800.0)
    assert [(p["name"], p["restarts"], p["hangRestarts"]) for p in detail["pods"]] == [
        ("demo-worker-0", 0, 2),
        ("demo-worker-1", 0, 0),
    ]


@pytest.mark.parametrize(
    ("history", "lost", "by_cause", "goodput"),
    [
        ([], 0, {}, 1.0),
        (
            [
                {"kind": "fault", "fault": "Exited", "recoverySeconds": 10},
                {"kind": "fault", "fault": "Exited", "recoverySeconds": 5},
                {"kind": "fault", "fault": "NodeNotReady", "recoverySeconds": 25},
                {"kind": "fault", "fault": "Hang", "recoverySeconds": None},  # not recovered (yet)
                {"kind": "scale", "recoverySeconds": 99},  # not a fault
            ],
            40,
            {"Exited": 15, "NodeNotReady": 25},
            0.6,
        ),
    ],
)
def test_time_lost_by_cause_and_goodput(history, lost, by_cause, goodput) -> None:  # type: ignore[no-untyped-def]
    figures = time_lost({"history": history}, start=0.0, end=100.0)
    assert figures == {"elapsed_s": 100.0, "lost_s": lost, "lost_by_cause": by_cause, "goodput": goodput}


def _reformed(**fields: Any) -> dict[str, Any]:
    return {"kind": "reformed", "action": "none", "reformation": {"round": 4, **fields}}


@pytest.mark.parametrize(
    ("entry", "label"),
    [
        ({"kind": "fault", "action": "restart"}, "restart"),
        ({"kind": "fault", "action": "restart-workers"}, "restart-workers"),
        ({"kind": "release", "action": "release"}, "survivors released"),
        ({"kind": "release", "action": "wait"}, "survivors wait"),
        (
            _reformed(worldSize=3, step=120, origin="live"),
            "re-formed live: round 4, 3 workers at step 120",
        ),
        (
            _reformed(worldSize=4, step=7, origin="peer"),
            "re-formed live: round 4, 4 workers at step 7 (the state from a peer)",
        ),
        (
            _reformed(worldSize=4, step=7, origin="peer", after="scale-out", afterPods=["w-3"]),
            "re-formed live: round 4, 4 workers at step 7, after the scale-out that added w-3 "
            "(newcomers got the state from a peer)",
        ),
        (
            _reformed(worldSize=2, step=7, origin="live", after="fault", afterPods=["w-1"]),
            "re-formed live: round 4, 2 workers at step 7, after w-1 failed",
        ),
        (
            _reformed(worldSize=2, origin="live", after="scale-in", afterPods=["w-2", "w-3"]),
            "re-formed live: round 4, 2 workers, after the scale-in that removed w-2, w-3",
        ),
        (_reformed(worldSize=1, origin="disk"), "re-formed live: round 4, 1 worker (the state from disk)"),
        (_reformed(), "re-formed live: round 4"),
        ({"kind": "scale", "action": "scaleout"}, "scaleout"),
        ({"kind": "isolate", "action": "isolate", "node": "n3"}, "node n3 isolated"),
        (
            {"kind": "straggler", "action": "none", "straggler": {"rank": 2, "ratio": 2.54}},
            "straggler: rank 2, 2.5x the others",
        ),
        (
            {"kind": "straggler", "action": "restart", "straggler": {"rank": 0}},
            "straggler: rank 0 (replaced)",
        ),
        ({"kind": "isolate", "action": "refuse", "node": "n3"}, "node n3 not isolated (bound)"),
        (
            {"kind": "fault", "action": "restart", "check": {"scenario": 1}},
            "restart (fault tolerance check, scenario 1)",
        ),
    ],
)
def test_the_history_says_what_each_entry_did_in_its_own_words(entry: dict[str, Any], label: str) -> None:
    assert history_label(entry) == label


def test_a_jobs_page_gives_each_history_entry_its_words() -> None:
    job = load_object(JOB, "test").job
    history = [
        {"kind": "fault", "at": 1.0, "action": "restart-workers", "fault": "Exited", "reason": "x"},
        {"kind": "reformed", "at": 2.0, "action": "none", "reason": "y",
         "reformation": {"round": 2, "worldSize": 3, "step": 5, "origin": "live", "seconds": 0.3}},
    ]  # fmt: skip
    detail = job_detail(job, _view(phase="Running", pods=[], history=history), [], now=1795600800.0)
    assert [(h["kind"], h["label"]) for h in detail["history"]] == [
        ("fault", "restart-workers"),
        ("reformed", "re-formed live: round 2, 3 workers at step 5"),
    ]
    assert detail["history"][1]["reformation"]["seconds"] == 0.3  # the page's recovery column


@pytest.mark.parametrize(("fault", "flag"), [("137", ["--exit-code", "137"]), ("1", ["--exit-code", "1"]),
                                              ("NodeNotReady", ["--event", "nodeNotReady"]), ("Hang", ["--hang"])])  # fmt: skip
def test_what_if_is_trainguard_explains_answer(
    fault: str, flag: list[str], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    job = load_object(JOB, "test").job
    answer = what_if_answer(job, _view(pods=[_pod(1, "Running")]), "demo-worker-1", fault)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(JOB))
    assert main(["explain", str(path), "--role", "worker", "--index", "1", *flag, "-o", "json"]) == 0
    explained = json.loads(capsys.readouterr().out)
    assert {key: answer[key] for key in explained} == explained


def test_what_if_counts_the_restarts_the_role_spent() -> None:
    job = load_object(JOB, "test").job
    view = _view(pods=[_pod(0, "Running")], restartCounts={"worker": 4})
    assert what_if_answer(job, view, "demo-worker-0", "137")["restarts_spent"] == 4


@pytest.mark.parametrize(
    ("pod", "fault", "status", "message"),
    [
        ("demo-worker-9", "137", 404, "no pod 'demo-worker-9'"),
        ("demo-worker-0", "256", 400, "exit codes are 0-255"),
        ("demo-worker-0", "<b>x</b>", 400, "fault '<b>x</b>': an exit code"),
    ],
)
def test_what_if_refuses_what_it_cannot_answer(pod: str, fault: str, status: int, message: str) -> None:
    job = load_object(JOB, "test").job
    with pytest.raises(PageError, match=message) as raised:
        what_if_answer(job, _view(pods=[_pod(0, "Running")]), pod, fault)
    assert raised.value.status == status


def test_the_bandwidth_probes_slowest_pod_is_named_on_the_page_and_in_describe() -> None:
    """From the status the engine wrote (``FaultCheckStatus.slow_link``, as JSON), the same words in both."""
    status = FaultCheckStatus(
        links=(
            LinkRecord(pod="j-worker-0", node="n0", mbps=900.0),
            LinkRecord(pod="j-worker-1", node="n1", mbps=60),
        ),
        slow_link=LinkRecord(pod="j-worker-1", node="n1", mbps=60.0, median=480.0),
    )
    checked = status.model_dump(mode="json", by_alias=True)
    words = (
        "slowest link: j-worker-1 on n1, 60.0 MB/s to the next pod of its role (the role's median 480.0 MB/s)"
    )
    shown = pages.fault_check({"faultCheck": checked})
    assert shown is not None
    assert shown["slow_link"] == words
    assert words in views.fault_check_lines({"faultCheck": checked})
    assert pages.fault_check({"faultCheck": {**checked, "slowLink": None}})["slow_link"] is None  # type: ignore[index]
