"""Suspected hangs (detection only, ModelArts' "the job may be suspended"): a GPU job with hang handling off
runs its agents with ``--report-only`` (``trainguard.controller.agent_options``); a pod whose agent suspects a
hang gets ``suspectedHang`` in its status and a Warning Event ``SuspectedHang``, once per episode; both clear
(a Normal Event ``SuspicionCleared``) when progress resumes. Nothing is restarted or counted.
"""

from __future__ import annotations

from trainguard.controller.backend import EventType, ObservedPhase
from trainguard.controller.cycle import Cycle
from trainguard.controller.status import SuspectedHang

#: A Warning Event: a pod's agent suspects the job hangs.
SUSPECTED_HANG = "SuspectedHang"
#: A Normal Event: progress resumed in a pod suspected of hanging.
SUSPICION_CLEARED = "SuspicionCleared"


def record_suspicions(cycle: Cycle) -> None:
    for pod in cycle.observed.pods:
        slot = cycle.slots.get(pod.name)
        if slot is None or slot.generation != pod.generation or pod.phase is not ObservedPhase.RUNNING:
            continue
        seen = pod.agent.suspected_hang if pod.agent is not None else None
        if seen is not None and slot.suspected_hang is None:
            cycle.put(
                slot,
                suspected_hang=SuspectedHang(
                    signal=seen.signal, idle_seconds=seen.idle_seconds, since=cycle.now
                ),
            )
            cycle.emit(
                EventType.WARNING,
                SUSPECTED_HANG,
                f"the job may be suspended: pod {pod.name} made no progress ({seen.signal}) for "
                f"{seen.idle_seconds:.0f} s; detection only, nothing is restarted (restart upon suspension "
                "is off)",
                pod.name,
            )
        elif seen is None and slot.suspected_hang is not None:
            cycle.put(slot, suspected_hang=None)
            cycle.emit(EventType.NORMAL, SUSPICION_CLEARED, f"pod {pod.name} makes progress again", pod.name)
