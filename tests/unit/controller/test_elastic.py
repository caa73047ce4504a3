"""Elastic roles: shrink instead of replacing when a pod fails for good, grow back when capacity returns."""

from __future__ import annotations

from tests.unit.controller.harness import Harness, cce_spec, make_job, with_role
from trainguard.controller import JobPhase, PodPhase

JOB = "test-horovod-elastic"
TRAINER_1 = f"{JOB}-trainer-1"


def tight(**trainer: object) -> Harness:
    """CCE's example job on exactly as many nodes as it has pods, so a lost node leaves no room."""
    return Harness.start(make_job(with_role(cce_spec(), "trainer", **trainer)), nodes=4)


def test_a_trainer_that_fails_for_good_shrinks_the_role_and_grows_back_when_its_node_returns() -> None:
    h = tight(restartLimit=0)
    h.running()
    lost = h.pod(TRAINER_1).node or ""
    h.cluster.node_down(lost)
    h.step()
    assert h.pod(TRAINER_1).phase is PodPhase.SHRUNK
    assert h.status.phase is JobPhase.SCALING
    assert h.status.conditions[-1].message == (
        f"trainingJob default/{JOB} scalein Operation scalein scale num 1 scale pods [{TRAINER_1}], "
        "replicas name trainer job version 0"
    )
    assert h.status.replicas["trainer"] == 2
    assert h.status.desired["trainer"] == 3
    for _ in range(5):
        h.tick()
    assert h.status.phase is JobPhase.RUNNING
    assert h.pod(TRAINER_1).phase is PodPhase.SHRUNK
    h.cluster.node_up(lost)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING and h.pod(TRAINER_1).phase is PodPhase.RUNNING)
    assert h.status.replicas["trainer"] == 3
    assert [e.kind for e in h.status.history] == ["fault", "grow"]
    assert h.status.history[0].action == "shrink"


def test_a_replacement_without_room_times_out_then_shrinks_and_grows_on_a_new_node() -> None:
    h = tight(restartLimit=1)
    h.running()
    h.cluster.node_down(h.pod(TRAINER_1).node or "")
    h.run_until(lambda h: h.pod(TRAINER_1).phase is PodPhase.SHRUNK, limit=120)
    assert [(e.fault, e.action) for e in h.status.history] == [
        ("NodeNotReady", "restart"),
        ("StartTimeout", "shrink"),
    ]
    h.cluster.add_node("spare")
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING and h.pod(TRAINER_1).phase is PodPhase.RUNNING)
    assert h.cluster.pods[TRAINER_1].node == "spare"


def test_shrinking_below_min_replicas_fails_the_role_and_the_job() -> None:
    h = tight(restartLimit=0, minReplicas=3)
    h.running()
    h.cluster.node_down(h.pod(TRAINER_1).node or "")
    h.step()
    assert h.status.phase is JobPhase.FAILED
    assert "minReplicas 3" in h.status.message


def test_a_program_failure_shrinks_but_does_not_grow_back() -> None:
    h = Harness.start(make_job(with_role(cce_spec(), "trainer", restartLimit=0, restartPolicy="OnFailure")))
    h.running()
    h.cluster.exit(TRAINER_1, 1)
    for _ in range(5):
        h.tick()
    assert h.pod(TRAINER_1).phase is PodPhase.SHRUNK
    assert h.status.phase is JobPhase.RUNNING
