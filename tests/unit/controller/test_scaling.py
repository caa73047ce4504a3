"""Scale requests and edits of the replicas: Scaling conditions as CCE words them, bounds, history."""

from __future__ import annotations

from tests.unit.controller.harness import Harness, cce_spec, make_job, with_role
from trainguard.controller import JobPhase, PodPhase, TerminatePod

JOB = "test-horovod-elastic"


def test_scale_out_adds_the_next_index_with_cces_scaling_condition() -> None:
    h = Harness.start()
    h.running()
    h.cluster.scale("trainer", 4)
    h.step()
    assert h.status.phase is JobPhase.SCALING
    scaling = h.status.conditions[-1]
    assert scaling.type is JobPhase.SCALING
    assert scaling.message == (
        f"trainingJob default/{JOB} scaleout Operation scaleout scale num 1 "
        f"scale pods [{JOB}-trainer-3], replicas name trainer job version 1"
    )
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert [c.type for c in h.status.conditions][-2:] == [JobPhase.SCALING, JobPhase.RUNNING]
    assert h.status.conditions[-2].status == "False"
    assert h.status.replicas["trainer"] == 4
    assert len(h.cluster.running("trainer")) == 4
    assert h.status.history[-1].kind == "scale"
    assert h.status.history[-1].action == "scaleout"


def test_scale_in_removes_the_highest_indices() -> None:
    h = Harness.start()
    h.running()
    h.cluster.scale("trainer", 1)
    h.step()
    assert h.status.conditions[-1].message == (
        f"trainingJob default/{JOB} scalein Operation scalein scale num 2 "
        f"scale pods [{JOB}-trainer-2 {JOB}-trainer-1], replicas name trainer job version 1"
    )
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert h.cluster.running("trainer") == [f"{JOB}-trainer-0"]
    assert h.status.replicas["trainer"] == 1
    removed = {p.name for p in h.status.pods if p.phase is PodPhase.REMOVED}
    assert removed == {f"{JOB}-trainer-1", f"{JOB}-trainer-2"}


def test_scaling_in_then_out_again_gives_the_index_a_new_incarnation() -> None:
    h = Harness.start()
    h.running()
    h.cluster.scale("trainer", 2)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING and len(h.cluster.running("trainer")) == 2)
    h.cluster.scale("trainer", 3)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING and len(h.cluster.running("trainer")) == 3)
    assert h.pod(f"{JOB}-trainer-2").generation == 2
    assert "job version 2" in next(c for c in h.status.conditions if c.type is JobPhase.SCALING).message


def test_scale_outside_bounds_is_rejected_and_changes_nothing() -> None:
    h = Harness.start()
    h.running()
    launches = len(h.cluster.launches())
    h.cluster.scale("trainer", 7)
    h.tick()
    h.tick()
    assert h.status.phase is JobPhase.RUNNING
    assert h.status.desired["trainer"] == 3
    assert len(h.cluster.launches()) == launches
    rejected = h.status.history[-1]
    assert rejected.kind == "scale-rejected"
    assert "replicas 7 outside [1, 5]" in rejected.reason
    assert any(e.reason == "ScaleRejected" for e in h.cluster.events())


def test_scale_of_an_unknown_role_is_rejected_with_the_roles_named() -> None:
    h = Harness.start()
    h.running()
    h.cluster.scale("worker", 2)
    h.step()
    assert "launcher, trainer" in h.status.history[-1].reason


def test_an_edit_of_the_jobs_replicas_scales_like_a_request() -> None:
    h = Harness.start()
    h.running()
    h.job = make_job(with_role(cce_spec(), "trainer", replicas=5))
    h.step()
    assert h.status.phase is JobPhase.SCALING
    assert "scale num 2" in h.status.conditions[-1].message
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert len(h.cluster.running("trainer")) == 5


def test_a_scale_request_is_taken_once() -> None:
    h = Harness.start()
    h.running()
    h.cluster.scale("trainer", 2)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    h.cluster.scale("trainer", 3)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING and h.status.replicas["trainer"] == 3)
    for _ in range(3):
        h.tick()
    assert h.status.replicas["trainer"] == 3
    assert h.status.scale_version == 2


def test_scaled_in_pods_are_terminated_once() -> None:
    h = Harness.start()
    h.running()
    h.cluster.scale("trainer", 1)
    for _ in range(5):
        h.tick()
    terminations = [a.pod for a in h.cluster.log if isinstance(a, TerminatePod)]
    assert sorted(terminations) == [f"{JOB}-trainer-1", f"{JOB}-trainer-2"]


def test_an_index_scaled_away_after_failing_comes_back_clean() -> None:
    job = make_job(
        with_role(cce_spec(), "trainer", restartLimit=0, restartPolicy="OnFailure", failPolicy="All")
    )
    h = Harness.start(job)
    h.running()
    h.cluster.exit(f"{JOB}-trainer-2", 1)
    h.run_until(lambda h: h.pod(f"{JOB}-trainer-2").phase is PodPhase.SHRUNK)
    h.cluster.scale("trainer", 2)
    h.run_until(
        lambda h: h.status.phase is JobPhase.RUNNING and h.pod(f"{JOB}-trainer-2").phase is PodPhase.REMOVED
    )
    h.cluster.scale("trainer", 3)
    h.run_until(
        lambda h: h.status.phase is JobPhase.RUNNING and h.pod(f"{JOB}-trainer-2").phase is PodPhase.RUNNING
    )
    assert {"role": "trainer", "index": 2} not in h.status.policy_state["failedPods"]
