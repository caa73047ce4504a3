"""Fencing (``trainguard.policy.fencing``) as the engine carries it out: a restart's replacement of a pod on a
node that is not Ready waits until the old incarnation's agent has ended its workers by itself (the operator's
one setting, ``--fence-seconds``), recorded as the slot's and the fault's ``fencedUntil`` and said once in a
``FencingWait`` Event."""

from __future__ import annotations

from collections.abc import Sequence

from trainguard.controller.backend import EventType
from trainguard.controller.cycle import Cycle
from trainguard.controller.phases import PodPhase
from trainguard.controller.status import PodStatus


def unconfirmed(cycle: Cycle, slot: PodStatus) -> bool:
    """Whether the slot's current incarnation may run on unseen once removed: launched, on a node that is
    not Ready (no kubelet confirms its end), on a backend whose lost pods may do so (``Observed.fencing``)."""
    if cycle.observed.fencing is None or slot.phase is PodPhase.WAITING or slot.node is None:
        return False
    node = cycle.node(slot.node)
    return node is not None and not node.ready


def fenced_until(cycle: Cycle, targets: Sequence[PodStatus]) -> float | None:
    """Fencing (``policy.fencing``): when the restart's replacements of pods on nodes that are not Ready may be
    launched, their old incarnations' agents having ended their workers by then; None if no target is such."""
    setting = cycle.observed.fencing
    if setting is None or not any(unconfirmed(cycle, target) for target in targets):
        return None
    return cycle.now + setting.seconds


def say_wait(cycle: Cycle, slot: PodStatus, fenced_until: float) -> None:
    cycle.emit(
        EventType.NORMAL,
        "FencingWait",
        f"pod {slot.name} is replaced after {fenced_until - cycle.now:.0f} s: its node {slot.node} is not "
        "Ready, and its workers may run until their agent ends them",
        slot.name,
    )
