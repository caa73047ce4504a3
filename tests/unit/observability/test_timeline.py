"""The fault timeline rebuilt from a status: the intervals and events that ``trainguard plot`` draws."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.controller.harness import Harness, worker_job
from tests.unit.observability.scenario import JOB, bad_night, pod
from trainguard.controller import JobPhase
from trainguard.observability.timeline import Timeline, build, status_of


@pytest.fixture(scope="module")
def night() -> Timeline:
    h = bad_night()
    return build(JOB, h.status.to_dict())


def spans(timeline: Timeline, name: str) -> list[tuple[float, float, str]]:
    return [(s.start, s.end, s.state) for s in timeline.lane(name).segments]


def test_each_pod_runs_fails_hangs_and_comes_back_when_the_history_says(night: Timeline) -> None:
    assert (night.start, night.end) == (0.0, 10.0)
    assert spans(night, pod("launcher", 0)) == [(0, 1, "starting"), (1, 10, "running")]
    # Killed at 3 (exit 137), a new pod running at 5.
    assert spans(night, pod("trainer", 1)) == [
        (0, 1, "starting"),
        (1, 3, "running"),
        (3, 5, "failed"),
        (5, 10, "running"),
    ]
    # Hung at 6, restarted in place, running again at 7.
    assert spans(night, pod("trainer", 0)) == [
        (0, 1, "starting"),
        (1, 6, "running"),
        (6, 7, "hung"),
        (7, 10, "running"),
    ]
    # Force-deleted at 8, replaced at once (a first restart waits no backoff), then scaled in at 9.
    assert spans(night, pod("trainer", 2)) == [(0, 1, "starting"), (1, 8, "running"), (8, 9, "lost")]
    # Scaled out at 7, running from 8, scaled in at 9.
    for index in (3, 4):
        assert spans(night, pod("trainer", index)) == [(7, 8, "starting"), (8, 9, "running")]
    assert [lane.pod for lane in night.lanes] == [pod("launcher", 0), *(pod("trainer", i) for i in range(5))]


def test_each_fault_is_marked_with_what_was_done_and_its_recovery_time(night: Timeline) -> None:
    marks = [(f.at, f.pod, f.fault, f.restart, f.recovery_seconds) for f in night.faults]
    assert marks == [
        (3.0, pod("trainer", 1), "Exited", "new pod", 2.0),
        (6.0, pod("trainer", 0), "Hang", "in place", 1.0),
        (8.0, pod("trainer", 2), "PodForceDeleted", "new pod", 1.0),
    ]
    assert [f.label for f in night.faults] == [
        "Exited 137 → restarted (new pod) · 2.0 s",
        "Hang → restarted (in place) · 1.0 s",
        "PodForceDeleted → restarted (new pod) · 1.0 s",
    ]


def test_scaling_steps_name_the_role_the_size_and_the_pods(night: Timeline) -> None:
    steps = [
        (s.at, s.role, s.operation, s.cause, s.replicas, len(s.pods), s.label) for s in night.scale_steps
    ]
    assert steps == [
        (7.0, "trainer", "scaleout", "request", 5, 2, "trainer → 5"),
        (9.0, "trainer", "scalein", "request", 2, 3, "trainer → 2"),
    ]


def test_the_job_phases_follow_the_transitions(night: Timeline) -> None:
    assert [(s.start, s.end, s.state) for s in night.phases] == [
        (0, 1, "Pending"),
        (1, 3, "Running"),
        (3, 5, "Restarting"),
        (5, 6, "Running"),
        (6, 7, "Restarting"),
        (7, 8, "Scaling"),
        (8, 9, "Restarting"),
        (9, 10, "Scaling"),
    ]


def test_what_get_json_prints_gives_the_same_timeline() -> None:
    h = bad_night()
    raw = h.status.to_dict()
    # `get -o json` keeps only the users' fields of each pod (no runningSince, launchedAt, ...).
    shown = {
        **raw,
        "pods": [{k: p[k] for k in ("name", "role", "index", "phase", "restarts")} for p in raw["pods"]],
    }
    name, status = status_of({"metadata": {"name": JOB}, "status": shown})
    assert name == JOB
    assert build(name, status) == build(JOB, raw)


def test_a_restart_of_scope_replica_takes_the_whole_role_down_until_it_recovers() -> None:
    h = Harness.start(worker_job(2, restartScope="Replica"))
    h.running()
    h.tick()
    h.cluster.exit("job-worker-0", 1)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING and len(h.cluster.running()) == 3)
    timeline = build("job", h.status.to_dict())
    (fault,) = timeline.faults
    assert fault.pods == ("job-worker-0", "job-worker-1")
    assert fault.label.startswith("Exited 1 → restarted (new pod, scope Replica) · ")
    recovered = fault.at + (fault.recovery_seconds or 0)
    assert (fault.at, recovered, "failed") in spans(timeline, "job-worker-0")
    assert (fault.at, recovered, "restarting") in spans(timeline, "job-worker-1")
    assert spans(timeline, "job-master-0")[-1][2] == "running"


def test_a_lost_node_moves_the_pod_and_a_shrunk_pod_leaves_its_lane() -> None:
    h = Harness.start(
        worker_job(3, minReplicas=1, maxReplicas=3, failPolicy="None", restartPolicy="OnNodeFailWithExitCode")
    )
    h.running()
    h.tick()
    node = h.pod("job-worker-1").node
    h.cluster.node_down(node)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING and len(h.cluster.running()) == 4)
    h.cluster.exit("job-worker-2", 3)  # not retryable: the elastic role goes on without it
    h.run_until(
        lambda h: h.status.phase is JobPhase.RUNNING and h.pod("job-worker-2").phase.value == "Shrunk"
    )
    h.tick()
    timeline = build("job", h.status.to_dict())
    moved, shrunk = timeline.faults
    assert (moved.fault, moved.restart) == ("NodeNotReady", "on another node")
    assert (shrunk.action, shrunk.restart, shrunk.label) == ("shrink", "", "Exited 3 → shrink")
    assert spans(timeline, "job-worker-2")[-1][1] == shrunk.at  # the lane ends with the pod
    step = timeline.scale_steps[-1]
    assert (step.operation, step.cause, step.pods, step.label) == (
        "scalein",
        "shrink",
        ("job-worker-2",),
        "worker -1",
    )


def test_a_finished_job_ends_every_lane_at_completion_and_an_ongoing_one_at_now() -> None:
    h = Harness.start(worker_job(1))
    h.running()
    h.tick()
    h.tick()
    ongoing = build("job", h.status.to_dict(), now=100.0)
    assert ongoing.end == 100.0
    assert spans(ongoing, "job-worker-0")[-1][1:] == (100.0, "running")
    h.cluster.exit("job-master-0", 0)
    h.run_until(lambda h: h.status.phase is JobPhase.SUCCEEDED)
    done = build("job", h.status.to_dict(), now=100.0)
    assert done.end == h.status.completed_at
    assert all(lane.segments[-1].end == done.end for lane in done.lanes)


@pytest.mark.parametrize(
    ("document", "name"),
    [
        ({"metadata": {"name": "a"}, "status": {"phase": "Running"}}, "a"),
        ({"phase": "Running", "history": []}, "job"),
        ({"job": "b", "phase": "Running", "history": []}, "b"),
    ],
)
def test_status_of_accepts_a_job_or_a_bare_status(document: dict[str, Any], name: str) -> None:
    assert status_of(document)[0] == name


def test_status_of_rejects_anything_else() -> None:
    with pytest.raises(ValueError, match="neither a job"):
        status_of({"kind": "List", "items": []})


def test_the_data_behind_the_picture_is_json_with_labels(night: Timeline) -> None:
    data = night.to_dict()
    assert set(data) == {"job", "start", "end", "phases", "lanes", "faults", "scale_steps"}
    assert data["faults"][1]["label"] == "Hang → restarted (in place) · 1.0 s"
    assert data["scale_steps"][0]["label"] == "trainer → 5"
    assert data["lanes"][0]["segments"][0] == {"start": 0.0, "end": 1.0, "state": "starting"}
