"""From the status to actions: what must be done on the cluster so that it matches the status.

Level-triggered: every action follows from the status (after this cycle's decisions) and the observation
alone, and carries a key that names its intent, so an action already issued is not issued again, and one
whose issue was lost (a controller that crashed before storing the status saying so) is issued again.

- a launched slot whose incarnation was never seen and is not there: launch it;
- a slot with more restarts in place than its agent has done: ask for the next one;
- a pod of an older incarnation, of a slot left out (shrunk, scaled in, removed at the end), of a slot that
  failed for good but still runs, or of no slot at all: remove it; after the end, under cleanPodPolicy All,
  every pod;
- a pod stuck terminating (on a node that is not Ready, or past its grace period): remove it at once;
- a pod removed by force from a node that is not Ready may still run there, unseen: its slot's next
  incarnation is not launched before ``fenced_until`` (fencing, ``policy.fencing``), unless it already was;
- a launch that had to wait for the previous incarnation to be gone: launch it again, under a new key.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainguard.api import CleanPodPolicy
from trainguard.controller import keys
from trainguard.controller.backend import EventType, LaunchPod, ObservedPhase, ObservedPod, RestartInPlace
from trainguard.controller.cycle import Cycle
from trainguard.controller.launchspec import RoleLaunch, launch_spec, role_launch
from trainguard.controller.phases import LAUNCHED_PHASES, LEFT_OUT_PHASES, PodPhase
from trainguard.controller.status import PodStatus

#: Slots whose current incarnation stays, whatever it shows.
_KEPT = frozenset(PodPhase) - {PodPhase.SHRUNK, PodPhase.REMOVED, PodPhase.FAILED}
_STILL_RUNS = (ObservedPhase.PENDING, ObservedPhase.RUNNING, ObservedPhase.UNKNOWN)
_WHY_LAUNCHED = {"restart": "restart", "scale": "scale out", "grow": "grow back", "resume": "resume"}


#: A launched pod never listed this long after its launch went before anyone saw it (deleted at once, or by
#: a node's loss before the watch showed it): it is launched again as a new incarnation.
UNSEEN_LAUNCH_S = 60.0


def actuate(cycle: Cycle) -> None:
    launches = _Launches(cycle)
    for slot in cycle.ordered_slots():
        if slot.phase is PodPhase.PENDING and not slot.seen and not cycle.observed_pods(slot.name):
            relaunch_at = unseen_until(cycle, slot)
            if relaunch_at is not None and cycle.now >= relaunch_at:
                slot = cycle.put(slot, generation=slot.generation + 1, launched_at=cycle.now)
                cycle.emit(
                    EventType.WARNING,
                    "PodNotListed",
                    f"pod {slot.name} was launched {UNSEEN_LAUNCH_S:.0f} s ago and never listed: launched again",
                    slot.name,
                )
            _launch(cycle, slot, launches)
        if slot.in_place_restarts and slot.phase in LAUNCHED_PHASES:
            pods = cycle.observed_pods(slot.name)
            current = next((pod for pod in pods if pod.generation == slot.generation), None)
            if current is not None:
                _restart_in_place(cycle, slot, current)
    clean_all = cycle.phase.is_terminal and cycle.job.spec.clean_pod_policy is CleanPodPolicy.ALL
    slots = cycle.slots
    for pod in cycle.observed.pods:
        if pod.terminating:  # on its way out already; removed at once if it cannot finish by itself
            stuck = _stuck(cycle, pod)
            if stuck is not None:
                cycle.remove_stuck(pod, stuck)
                _fence(cycle, pod)
            continue
        kept = slots.get(pod.name)
        if kept is not None and kept.generation == pod.generation and kept.phase in _KEPT and not clean_all:
            continue  # most pods: the current incarnation of a slot that wants it (as ``_unwanted`` says)
        why = _unwanted(cycle, pod, clean_all)
        if why is not None:
            node = cycle.node(pod.node)
            lost = node is not None and not node.ready
            cycle.terminate(pod.name, pod.generation, why, force=lost)
            if lost:
                _fence(cycle, pod)


def _fence(cycle: Cycle, pod: ObservedPod) -> None:
    """``pod`` is removed by force: if its node is not Ready, its slot's next incarnation waits for its agent to
    have ended it (``fenced_until``), unless the slot is fenced already or its next incarnation launched."""
    fencing = cycle.observed.fencing
    node = cycle.node(pod.node)
    slot = cycle.slots.get(pod.name)
    if fencing is None or cycle.phase.is_terminal or node is None or node.ready:
        return
    if slot is None or slot.phase in LAUNCHED_PHASES:
        return
    if slot.fenced_until is not None and slot.fenced_until > cycle.now:
        return  # fenced already: by the fault's decision, or by an earlier reconcile's removal of this pod
    until = cycle.now + fencing.seconds
    cycle.put(slot, fenced_until=until)
    cycle.emit(
        EventType.NORMAL,
        "FencingWait",
        f"pod {pod.name} is launched again no sooner than {fencing.seconds:.0f} s from now: its node {pod.node} "
        "is not Ready, and its workers may run until their agent ends them",
        pod.name,
    )


def unseen_until(cycle: Cycle, slot: PodStatus) -> float | None:
    """When a launched slot whose pod was never listed is launched again (None: not such a slot, or its
    launch not issued yet)."""
    if slot.phase is not PodPhase.PENDING or slot.seen or slot.launched_at is None:
        return None
    if keys.launch(cycle.job, slot.name, slot.generation) not in cycle.issued:
        return None
    return slot.launched_at + UNSEEN_LAUNCH_S


class _Launches:
    """The launch specs of one reconcile: the roles' sizes and each role's command, worked out once."""

    def __init__(self, cycle: Cycle) -> None:
        self.cycle = cycle
        self._sizes: dict[str, int] | None = None
        self._roles: dict[str, RoleLaunch] = {}

    def sizes(self) -> dict[str, int]:
        if self._sizes is None:
            sizes = dict.fromkeys(self.cycle.job.spec.replica_specs, 0)
            for slot in self.cycle.slots.values():
                if slot.phase not in LEFT_OUT_PHASES and slot.role in sizes:
                    sizes[slot.role] += 1
            self._sizes = sizes
        return self._sizes

    def role(self, role: str) -> RoleLaunch:
        found = self._roles.get(role)
        if found is None:
            found = self._roles[role] = role_launch(self.cycle.job, role, self.cycle.observed.network)
        return found


def _launch(cycle: Cycle, slot: PodStatus, launches: _Launches) -> None:
    reason = _WHY_LAUNCHED.get(slot.cause, "start")
    job = cycle.job
    spec = launch_spec(
        job,
        slot.role,
        slot.index,
        slot.generation,
        slot.restarts,
        launches.sizes(),
        cycle.observed.network,
        launches.role(slot.role),
    )
    key, _ = cycle.launch_attempt(slot)  # the next attempt's, after one that had to wait
    action = LaunchPod(
        key=key,
        pod=slot.name,
        role=slot.role,
        index=slot.index,
        generation=slot.generation,
        restart_count=slot.restarts,
        reason=reason,
        spec=spec,
        avoid_nodes=slot.avoid_nodes,
        first_in_line=slot.name in _waiting_reissued(cycle),
    )
    if cycle.issue(action):
        cycle.emit(EventType.NORMAL, "SuccessfulCreatePod", f"created pod {slot.name} ({reason})", slot.name)


def _restart_in_place(cycle: Cycle, slot: PodStatus, pod: ObservedPod) -> None:
    done = pod.agent.in_place_restarts if pod.agent is not None else 0
    if done >= slot.in_place_restarts:
        return
    attempt = slot.in_place_restarts
    key = keys.restart_in_place(cycle.job, slot.name, slot.generation, attempt)
    reason = f"hang: restart in place {attempt} of this incarnation"
    cycle.issue(RestartInPlace(key, slot.name, slot.generation, attempt, reason))


def _stuck(cycle: Cycle, pod: ObservedPod) -> str | None:
    """Why a terminating pod will not finish by itself, or None while it may."""
    node = cycle.node(pod.node)
    if node is not None and not node.ready:
        return f"it is terminating on node {pod.node}, which is not Ready: no kubelet will confirm its end"
    if pod.overdue:
        return "it is still terminating after its grace period"
    return None


def _unwanted(cycle: Cycle, pod: ObservedPod, clean_all: bool) -> str | None:
    """Why ``pod`` has to go, or None if it may stay (``clean_all``: the job ended, cleanPodPolicy All)."""
    slot = cycle.slots.get(pod.name)
    if slot is None:
        return "no pod slot of the job has this name"
    if pod.generation < slot.generation:
        return f"replaced by incarnation {slot.generation} ({slot.cause})"
    if clean_all:
        return "the job ended (cleanPodPolicy All)"
    if pod.generation != slot.generation:
        return None
    if slot.phase in (PodPhase.SHRUNK, PodPhase.REMOVED):
        return slot.message or f"pod slot is {slot.phase.value}"
    if slot.phase is PodPhase.FAILED and pod.phase in _STILL_RUNS:
        return f"failed for good: {slot.message}"
    return None


def _waiting_reissued(cycle: Cycle) -> Mapping[str, float]:
    """The pods issued again after a failed check and not running yet (``controller.faultcheck``)."""
    checked = cycle.get("fault_check")
    return checked.waiting if checked is not None else {}
