"""Fencing in the engine: the replacement of a pod whose node is not Ready waits the backend's fencing seconds
from the decision (``PodStatus.fenced_until``, the fault's ``HistoryEntry.fenced_until``); nothing else waits."""

from __future__ import annotations

import pytest

from tests.unit.controller.harness import Harness
from trainguard.controller import LaunchPod
from trainguard.controller.backend import EmitEvent
from trainguard.controller.status import HistoryKind
from trainguard.policy.fencing import Fencing
from trainguard.policy.types import FaultKind

TRAINER = "test-horovod-elastic-trainer-1"


def _launches_of(h: Harness, pod: str) -> list[LaunchPod]:
    return [a for a in h.cluster.launches() if a.pod == pod]


@pytest.mark.parametrize(
    ("fencing", "fault", "waits"),
    [
        (Fencing(60.0), "node", 60.0),  # a node lost: its pod may run on unseen
        (Fencing(120.0), "node", 120.0),
        (None, "node", 0.0),  # a backend that sees every pod end: no wait
        (Fencing(60.0), "force-delete", 0.0),  # the node is Ready: its kubelet ends the pod
        (Fencing(60.0), "exit", 0.0),  # the pod ended, seen
    ],
)
def test_a_replacement_waits_the_fencing_seconds_only_when_no_kubelet_confirms_the_end(
    fencing: Fencing | None, fault: str, waits: float
) -> None:
    h = Harness.start()
    h.cluster.fencing = fencing
    h.running()
    pod = h.cluster.pods[TRAINER]
    assert pod.node is not None
    before = len(_launches_of(h, TRAINER))
    decided_at = h.cluster.now
    if fault == "node":
        h.cluster.node_down(pod.node)
    elif fault == "force-delete":
        h.cluster.force_delete(TRAINER)
    else:
        h.cluster.exit(TRAINER, 137)
    h.run_until(lambda h: len(_launches_of(h, TRAINER)) > before, limit=400)
    relaunched_at = h.cluster.now
    assert relaunched_at - decided_at >= waits
    assert relaunched_at - decided_at < waits + 5.0  # CCE's rule here restarts at once otherwise
    slot = h.pod(TRAINER)
    entry = next(e for e in reversed(h.status.history) if e.kind is HistoryKind.FAULT and e.pod == TRAINER)
    if waits:
        assert entry.fault is FaultKind.NODE_NOT_READY
        assert entry.fenced_until == slot.fenced_until == decided_at + waits
        assert any(isinstance(a, EmitEvent) and a.reason == "FencingWait" for a in h.cluster.log)
    else:
        assert entry.fenced_until is None
        assert slot.fenced_until is None


def test_a_fenced_slot_wakes_the_loop_when_its_wait_ends() -> None:
    h = Harness.start()
    h.cluster.fencing = Fencing(60.0)
    h.running()
    node = h.cluster.pods[TRAINER].node
    assert node is not None
    h.cluster.node_down(node)
    result = h.step()
    slot = h.pod(TRAINER)
    assert slot.fenced_until == h.cluster.now + 60.0
    assert result.wake_at is not None
    assert result.wake_at <= slot.fenced_until


def test_a_pod_removed_gracefully_then_by_force_from_a_lost_node_is_not_launched_again_before_its_fence() -> (
    None
):
    """Scaled in while its node was Ready (a graceful removal the cut-off kubelet never carries out), then its
    node goes NotReady: the pod is removed by force, and the slot's next incarnation (a scale-out) waits the
    fencing seconds from that removal."""
    victim = "test-horovod-elastic-trainer-2"
    h = Harness.start()
    h.cluster.fencing = Fencing(60.0)
    h.running()
    node = h.cluster.pods[victim].node
    assert node is not None
    h.cluster.sticky.add(victim)
    h.cluster.scale("trainer", 2)
    h.run_until(lambda h: h.cluster.pods[victim].terminating)
    before = len(_launches_of(h, victim))
    h.cluster.node_down(node)
    h.run_until(lambda h: victim not in h.cluster.pods)
    removed_at = h.cluster.now
    slot = h.pod(victim)
    assert slot.fenced_until is not None
    assert removed_at <= slot.fenced_until + 1.0 <= removed_at + 61.0
    h.cluster.scale("trainer", 3)
    h.run_until(lambda h: len(_launches_of(h, victim)) > before, limit=200)
    assert h.cluster.now >= slot.fenced_until
    events = [a for a in h.cluster.log if isinstance(a, EmitEvent) and a.reason == "FencingWait"]
    assert [e.pod for e in events] == [victim]


def test_without_fencing_the_same_slot_is_launched_again_at_once() -> None:
    victim = "test-horovod-elastic-trainer-2"
    h = Harness.start()
    h.running()
    node = h.cluster.pods[victim].node
    assert node is not None
    h.cluster.sticky.add(victim)
    h.cluster.scale("trainer", 2)
    h.run_until(lambda h: h.cluster.pods[victim].terminating)
    before = len(_launches_of(h, victim))
    h.cluster.node_down(node)
    h.run_until(lambda h: victim not in h.cluster.pods)
    removed_at = h.cluster.now
    assert h.pod(victim).fenced_until is None
    h.cluster.scale("trainer", 3)
    h.run_until(lambda h: len(_launches_of(h, victim)) > before, limit=200)
    assert h.cluster.now < removed_at + 10.0
