"""Which observed pod is a slot's own incarnation, and what a slot makes of pods launched by a controller run
whose status was never stored (``faults.observe_pods`` asks first; ``reconcile`` stores a vanished pod's
replacement after its launch on the same reading)."""

from __future__ import annotations

from collections.abc import Sequence

from trainguard.controller.backend import ObservedPod
from trainguard.controller.cycle import Cycle
from trainguard.controller.phases import LAUNCHED_PHASES, PodPhase
from trainguard.controller.status import PodStatus


def incarnation(pods: Sequence[ObservedPod], generation: int) -> ObservedPod | None:
    """The pod of this incarnation, if it is there (the first one listed, should a backend list it twice)."""
    for pod in pods:
        if pod.generation == generation:
            return pod
    return None


def vanished(slot: PodStatus, pods: Sequence[ObservedPod]) -> bool:
    """The slot's incarnation was launched and seen, and is not among ``pods`` (deleted under the job)."""
    return slot.seen and slot.phase in LAUNCHED_PHASES and incarnation(pods, slot.generation) is None


def adopt(cycle: Cycle, slot: PodStatus, pods: Sequence[ObservedPod]) -> PodStatus:
    """Pods launched by a controller run whose status was never stored: a waiting slot whose incarnation
    exists was launched, and an incarnation newer than the status knows of is the current one. Except where
    the stored incarnation vanished: its replacement went out before the decision was stored
    (``reconcile._replaces_vanished``), and the vanished pod's fault is decided again, as it was then; that
    decision launches the newer incarnation under the key it already went out under."""
    if not pods:
        return slot
    if slot.phase is PodPhase.WAITING and incarnation(pods, slot.generation) is not None:
        slot = cycle.put(slot, phase=PodPhase.PENDING, due_at=None, launched_at=cycle.now, seen=False)
    newest = pods[0].generation if len(pods) == 1 else max(pod.generation for pod in pods)
    if newest > slot.generation and slot.phase in LAUNCHED_PHASES and not vanished(slot, pods):
        slot = cycle.put(slot, generation=newest, seen=False, in_place_restarts=0, worker_restarts=0)
    return slot
