"""Stragglers in the engine: the job's ranks' work per step, as its pods' agents measured it, compared
(``trainguard.policy.stragglers``); each straggling incarnation recorded once (a ``straggler`` history entry
with its figures, a Warning Event ``Straggler``, the page), and, where the job asks for it
(``faultCheck.stragglers.action: Replace``), treated as a fault of its node: the pod issued again elsewhere and
the node isolated, within the fault tolerance check's bounds (``trainguard.controller.faultcheck``).
"""

from __future__ import annotations

from trainguard.controller.backend import EventType, ObservedPhase
from trainguard.controller.cycle import Cycle
from trainguard.controller.faultcheck import status_of
from trainguard.controller.faults import act_on
from trainguard.controller.status import FaultCheckStatus, HistoryEntry, HistoryKind, StragglerRecord
from trainguard.policy.faultcheck import enabled, policy_of
from trainguard.policy.stragglers import RankTiming, find_stragglers
from trainguard.policy.types import Fault, FaultKind, Remedy

#: Incarnations found straggling that the status remembers (the newest).
MAX_REMEMBERED = 200


def record_stragglers(cycle: Cycle) -> None:
    policy = policy_of(cycle.job).stragglers
    if not policy.enabled or not enabled(cycle.job):
        return
    timings: list[RankTiming] = []
    generation: dict[str, int] = {}
    for pod in cycle.observed.pods:
        agent = pod.agent
        if agent is None or not agent.ranks or pod.phase is not ObservedPhase.RUNNING:
            continue
        slot = cycle.slots.get(pod.name)
        if slot is None or slot.generation != pod.generation:
            continue
        generation[pod.name] = pod.generation
        timings += [
            RankTiming(pod.name, work.rank, work.steps, work.busy_seconds, work.step_seconds)
            for work in agent.ranks
        ]
    found = find_stragglers(timings, policy)
    if not found:
        return
    state = status_of(cycle)
    known = set(state.stragglers)
    for straggler in found:
        mark = f"{straggler.pod}#{generation[straggler.pod]}"
        if mark in known:
            continue
        known.add(mark)
        slot = cycle.slots[straggler.pod]
        figures = StragglerRecord(
            rank=straggler.rank,
            steps=straggler.steps,
            seconds=straggler.seconds,
            others=straggler.others,
            ratio=straggler.ratio,
        )
        replace = policy.action == "Replace"
        cycle.record(
            HistoryEntry(
                at=cycle.now,
                kind=HistoryKind.STRAGGLER,
                role=slot.role,
                pod=straggler.pod,
                node=slot.node,
                action=Remedy.RESTART if replace else Remedy.NONE,
                reason=straggler.words
                + (
                    "; faultCheck.stragglers.action Replace: it is treated as a fault of its node"
                    if replace
                    else ""
                ),
                straggler=figures,
            )
        )
        cycle.emit(EventType.WARNING, "Straggler", straggler.words, straggler.pod)
        if replace:
            fault = Fault(FaultKind.STRAGGLER, slot.ref, cycle.now, node=slot.node, message=straggler.words)
            act_on(cycle, fault)
    remembered = tuple(sorted(known))[-MAX_REMEMBERED:]
    cycle.updates["fault_check"] = (cycle.get("fault_check") or FaultCheckStatus()).model_copy(
        update={"stragglers": remembered}
    )
