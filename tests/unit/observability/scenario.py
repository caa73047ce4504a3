"""A night of faults on the fake cluster, driven through the real controller: what metrics and the timeline
are computed from in the unit tests."""

from __future__ import annotations

from tests.unit.controller.harness import Harness, cce_spec, make_job
from trainguard.controller import JobPhase

JOB = "test-horovod-elastic"


def pod(role: str, index: int) -> str:
    return f"{JOB}-{role}-{index}"


def _settled(h: Harness, pods: int) -> bool:
    recovered = all(e.recovered_at is not None for e in h.status.history if e.action.startswith("restart"))
    return h.status.phase is JobPhase.RUNNING and len(h.cluster.running()) == pods and recovered


def bad_night() -> Harness:
    """CCE's AITrainingJob example with hang handling: a trainer killed (137), one hung, the trainers scaled
    to 5, one force-deleted, then scaled in to 2. Each step is waited for; every tick is one second."""
    h = Harness.start(make_job(cce_spec(hang={"timeoutSeconds": 30, "maxConsecutive": 3})))
    h.running()
    h.tick()
    h.tick()
    h.cluster.exit(pod("trainer", 1), 137, signal=9)
    h.run_until(lambda h: _settled(h, 4))
    h.tick()
    h.cluster.hang(pod("trainer", 0))
    h.tick()
    h.run_until(lambda h: _settled(h, 4))
    h.cluster.scale("trainer", 5)
    h.run_until(lambda h: _settled(h, 6))
    h.cluster.force_delete(pod("trainer", 2))
    h.run_until(lambda h: _settled(h, 6))
    h.cluster.scale("trainer", 2)
    h.run_until(lambda h: _settled(h, 3))
    return h
