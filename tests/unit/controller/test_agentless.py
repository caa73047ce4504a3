"""Pods whose image cannot run the agent (``trainguard.controller.agentless``): one Warning Event per
incarnation, and the AgentUnavailable condition while such pods are there; the job itself goes on."""

from __future__ import annotations

from tests.unit.controller.harness import Harness
from trainguard.controller import EventType, JobPhase
from trainguard.controller.status import AGENT_UNAVAILABLE, Condition, JobStatus

WHY = "the image has no python3 (PATH=/usr/bin:/bin); trainguard's agent needs Python 3.8 or later"


def _condition(status: JobStatus) -> Condition | None:
    return next((c for c in status.conditions if c.type == AGENT_UNAVAILABLE), None)


def _warnings(h: Harness) -> list[tuple[str | None, str]]:
    return [(e.pod, e.message) for e in h.cluster.events() if e.reason == "AgentUnavailable"]


def test_a_pod_without_python_is_warned_about_once_and_named_in_a_condition() -> None:
    h = Harness.start()
    h.running()
    assert _condition(h.status) is None  # no condition for a job that never had such a pod
    h.cluster.without_agent("test-horovod-elastic-trainer-1", WHY)
    for _ in range(3):
        h.tick()
    (warning,) = _warnings(h)
    assert warning[0] == "test-horovod-elastic-trainer-1"
    assert WHY in warning[1]
    assert "no hang detection, no restart in place" in warning[1]
    assert all(e.type is EventType.WARNING for e in h.cluster.events() if e.reason == "AgentUnavailable")
    condition = _condition(h.status)
    assert condition is not None
    assert condition.status == "True"
    assert condition.message.startswith("pods [test-horovod-elastic-trainer-1]: the image has no python3")
    # The job goes on: the phase conditions are untouched, Running is still the last of them and True.
    assert h.status.phase is JobPhase.RUNNING
    phases = [c for c in h.status.conditions if c.type != AGENT_UNAVAILABLE]
    assert phases[-1].type is JobPhase.RUNNING
    assert phases[-1].status == "True"


def test_the_condition_names_every_such_pod_and_turns_false_when_none_is_left() -> None:
    h = Harness.start()
    h.running()
    for pod in ("test-horovod-elastic-trainer-2", "test-horovod-elastic-trainer-0"):
        h.cluster.without_agent(pod, WHY)
    h.tick()
    condition = _condition(h.status)
    assert condition is not None
    assert "pods [test-horovod-elastic-trainer-0 test-horovod-elastic-trainer-2]" in condition.message
    assert len(_warnings(h)) == 2
    since = condition.last_transition_time
    h.tick()
    still = _condition(h.status)
    assert still is not None
    assert still.last_transition_time == since
    for pod in ("test-horovod-elastic-trainer-2", "test-horovod-elastic-trainer-0"):
        h.cluster.pods[pod].agent_missing = None
    h.tick()
    cleared = _condition(h.status)
    assert cleared is not None
    assert cleared.status == "False"


def test_the_condition_survives_the_status_round_trip() -> None:
    h = Harness.start()
    h.running()
    h.cluster.without_agent("test-horovod-elastic-launcher-0", WHY)
    h.tick()
    again = JobStatus.from_dict(h.status.to_dict())
    assert _condition(again) == _condition(h.status)
    assert again == h.status
