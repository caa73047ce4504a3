"""Elastic scaling: users' scale requests, reaching each role's desired size, growing back after a shrink,
and the Horovod host list that tells a running job which workers it has.

A role's slots are kept dense: pods ``<role>-0 .. <role>-(N-1)``. Scaling out adds the lowest free indices;
scaling in removes the highest. A slot left out by an elastic shrink keeps its index (it is still part of
the desired size) and is started again when capacity returns.
"""

from __future__ import annotations

from dataclasses import replace

from trainguard.api import FrameworkType, ScaleTimeoutAction
from trainguard.controller import keys
from trainguard.controller.backend import EventType, ScaleRequest, UpdateDiscovery
from trainguard.controller.cycle import Cycle
from trainguard.controller.faults import CAPACITY_FAULTS
from trainguard.controller.phases import ALIVE_PHASES, PodPhase
from trainguard.controller.status import HistoryEntry, HistoryKind, PodStatus, ScaleOperation
from trainguard.policy import PodRef, pods_to_add, record_grown, resolve_role, validate_scale
from trainguard.policy.roles import is_leader
from trainguard.policy.types import Remedy

#: Scale requests remembered as handled (the backend drops old ones long before this).
MAX_HANDLED_REQUESTS = 500


def take_scale_requests(cycle: Cycle) -> None:
    """New desired sizes: from an edit of the job's replicas, then from scale requests, oldest first."""
    spec_replicas = dict(cycle.get("spec_replicas"))
    for role, spec in cycle.job.spec.replica_specs.items():
        if role in spec_replicas and spec_replicas[role] != spec.replicas:
            _accept(cycle, role, spec.replicas, "the job's replicas were edited")
        spec_replicas[role] = spec.replicas
    cycle.updates["spec_replicas"] = spec_replicas

    handled = list(cycle.get("handled_scale_requests"))
    for request in sorted(cycle.observed.scale_requests, key=lambda r: (r.at, r.id)):
        if request.id in handled:
            continue
        handled.append(request.id)
        _take(cycle, request)
    cycle.updates["handled_scale_requests"] = tuple(handled[-MAX_HANDLED_REQUESTS:])


def _take(cycle: Cycle, request: ScaleRequest) -> None:
    try:
        validate_scale(cycle.job, request.role, request.replicas)
        role, _ = resolve_role(cycle.job, request.role)
    except ValueError as error:
        reason = f"scale of role {request.role} to {request.replicas} rejected: {error}"
        entry = HistoryEntry(
            at=cycle.now,
            kind=HistoryKind.SCALE_REJECTED,
            role=request.role,
            action=Remedy.NONE,
            scale_from=cycle.desired.get(request.role),
            scale_to=request.replicas,
            reason=reason,
        )
        cycle.record(entry)
        cycle.emit(EventType.WARNING, "ScaleRejected", reason)
        return
    _accept(cycle, role, request.replicas, f"scale request {request.id}")


def _accept(cycle: Cycle, role: str, replicas: int, source: str) -> None:
    if cycle.desired.get(role) == replicas:
        return
    cycle.desired[role] = replicas
    cycle.updates["scale_version"] = cycle.get("scale_version") + 1
    cycle.emit(EventType.NORMAL, "ScaleAccepted", f"role {role}: {replicas} replicas ({source})")


def reach_desired(cycle: Cycle, cause: str) -> None:
    """Add or remove slots so that each role has its desired number (shrunk slots count as present)."""
    for role in cycle.job.spec.replica_specs:
        want = cycle.desired.get(role, 0)
        present = [s for s in cycle.role_slots(role) if s.phase is not PodPhase.REMOVED]
        if want > len(present):
            _scale_out(cycle, role, want - len(present), cause)
        elif want < len(present):
            _scale_in(cycle, role, len(present), present[want:])


def _scale_out(cycle: Cycle, role: str, count: int, cause: str) -> None:
    taken = {s.index for s in cycle.role_slots(role) if s.phase is not PodPhase.REMOVED}
    free = [index for index in range(len(taken) + count) if index not in taken]
    added: list[str] = []
    for index in free[:count]:
        name = cycle.name_of(PodRef(role, index))
        old = cycle.slots.get(name)
        # A slot scaled in earlier comes back as a new incarnation, so its keys are new ones.
        generation = old.generation + 1 if old is not None else 1
        cycle.add(
            PodStatus(
                name=name,
                role=role,
                index=index,
                phase=PodPhase.WAITING,
                generation=generation,
                restarts=old.restarts if old is not None else 0,
                hang_restarts=old.hang_restarts if old is not None else 0,
                due_at=cycle.now,
                fenced_until=old.fenced_until if old is not None else None,
                cause=cause,
                scaled_at=cycle.now if cause == "scale" else None,
            )
        )
        added.append(name)
    # An index used before starts clean: whatever its earlier pod ended as does not count for the new one.
    cycle.state = record_grown(cycle.state, [PodRef(role, cycle.slots[name].index) for name in added])
    if cause == "scale" and added:
        _record_scale(cycle, ScaleOperation.SCALE_OUT, role, added, len(taken), len(taken) + len(added))


#: The phases of a slot a scale-out added that does not run yet.
_NOT_YET_RUNNING = frozenset({PodPhase.WAITING, PodPhase.PENDING, PodPhase.CREATING})


def time_out_scale_steps(cycle: Cycle) -> None:
    """CCE's scaling timeout: the pods a scale-out added that do not run ``scaling.timeoutSeconds`` after the
    step was accepted. ``RollBack`` removes them and takes the role's size back by as many (the job trains on
    at the size it reached); ``Fail`` fails the job. Either way a ``ScaleTimeout`` Warning Event and a
    ``scale-timeout`` history entry name the pods. A slot's clock stops once its pod runs."""
    scaling = cycle.job.spec.scaling
    for role in cycle.job.spec.replica_specs:
        late: list[PodStatus] = []
        for slot in cycle.role_slots(role):
            if slot.scaled_at is None:
                continue
            if slot.phase not in _NOT_YET_RUNNING or slot.cause != "scale":
                cycle.put(slot, scaled_at=None)  # it ran (or ended otherwise): the step is done for it
            elif cycle.now >= slot.scaled_at + scaling.timeout_seconds:
                late.append(slot)
        if late:
            _timed_out(cycle, role, late, scaling.on_timeout)


def _timed_out(cycle: Cycle, role: str, late: list[PodStatus], action: ScaleTimeoutAction) -> None:
    names = [slot.name for slot in late]
    timeout = cycle.job.spec.scaling.timeout_seconds
    present = sum(1 for s in cycle.role_slots(role) if s.phase is not PodPhase.REMOVED)
    not_running = f"{len(names)} pods ({', '.join(names)}) not running {timeout} s after the scale-out"
    if action is ScaleTimeoutAction.FAIL:
        reason = f"scaling timeout of role {role}: {not_running}; spec.scaling.onTimeout is Fail"
        for slot in late:
            cycle.put(slot, scaled_at=None)
        if cycle.state.job_failure is None:
            cycle.state = replace(cycle.state, job_failure=reason)
        operation, after = ScaleOperation.SCALE_OUT, present
    else:
        reason = (
            f"scaling timeout of role {role}: {not_running}; rolled back to {present - len(names)} replicas"
        )
        cycle.desired[role] = cycle.desired.get(role, present) - len(names)
        cycle.updates["scale_version"] = cycle.get("scale_version") + 1
        for slot in late:
            cycle.put(slot, phase=PodPhase.REMOVED, open_faults=(), message="scaling timeout", due_at=None,
                      scaled_at=None)  # fmt: skip
        cycle.scale_message(ScaleOperation.SCALE_IN.value, role, names)
        operation, after = ScaleOperation.SCALE_IN, present - len(names)
    _record(cycle, HistoryKind.SCALE_TIMEOUT, operation, role, names, (present, after), reason)
    cycle.emit(EventType.WARNING, "ScaleTimeout", reason)


def scale_deadline(cycle: Cycle, slot: PodStatus) -> float | None:
    """When ``slot``, added by a scale-out and not running yet, times out; None for any other slot."""
    if slot.scaled_at is None or slot.phase not in _NOT_YET_RUNNING:
        return None
    return slot.scaled_at + cycle.job.spec.scaling.timeout_seconds


def _scale_in(cycle: Cycle, role: str, present: int, slots: list[PodStatus]) -> None:
    names = [slot.name for slot in reversed(slots)]
    for slot in reversed(slots):
        cycle.put(slot, phase=PodPhase.REMOVED, open_faults=(), message="scaled in", due_at=None)
    _record_scale(cycle, ScaleOperation.SCALE_IN, role, names, present, present - len(names))


def _record_scale(
    cycle: Cycle, operation: ScaleOperation, role: str, names: list[str], before: int, after: int
) -> None:
    reason = f"{operation.value} of role {role}: {len(names)} pods ({', '.join(names)})"
    _record(cycle, HistoryKind.SCALE, operation, role, names, (before, after), reason)
    cycle.scale_message(operation.value, role, names)
    cycle.emit(EventType.NORMAL, "Scaling", cycle.get("scaling_message"))


def _record(
    cycle: Cycle,
    kind: HistoryKind,
    operation: ScaleOperation,
    role: str,
    names: list[str],
    sizes: tuple[int, int],
    reason: str,
) -> None:
    """A scale step's history entry: the role's size before and after, and the counters of CCE's message."""
    counters = {"replicas": cycle.desired.get(role, 0), "jobVersion": cycle.get("scale_version")}
    cycle.record(
        HistoryEntry(
            at=cycle.now,
            kind=kind,
            role=role,
            pods=tuple(names),
            action=operation,
            scale_from=sizes[0],
            scale_to=sizes[1],
            reason=reason,
            counters=counters,
        )
    )


def grow_back(cycle: Cycle) -> None:
    """Start shrunk slots again where the nodes have room (only slots left out for want of a place)."""
    room = _free_slots(cycle)
    for role in cycle.job.spec.replica_specs:
        if room <= 0:
            return
        slots = cycle.role_slots(role)
        waiting = {s.index: s for s in slots if s.phase is PodPhase.SHRUNK and s.shrunk_for in _CAPACITY}
        if not waiting:
            continue
        alive = [s.index for s in slots if s.index not in waiting]
        refs = pods_to_add(cycle.job, role, alive, room, cycle.desired.get(role))
        grown = [waiting[ref.index] for ref in refs if ref.index in waiting]
        if not grown:
            continue
        cycle.state = record_grown(cycle.state, [slot.ref for slot in grown])
        for slot in grown:
            cycle.put(
                slot,
                phase=PodPhase.WAITING,
                generation=slot.generation + 1,
                due_at=cycle.now,
                seen=False,
                node=None,
                address=None,
                avoid_nodes=(),  # the room that returned may well be the node it left
                cause="grow",
                shrunk_for=None,
                message="",
            )
        room -= len(grown)
        names = [slot.name for slot in grown]
        reason = f"capacity returned: role {role} grows back by {len(names)} ({', '.join(names)})"
        before = sum(1 for s in slots if s.phase in ALIVE_PHASES and s.index not in waiting)
        entry = HistoryEntry(
            at=cycle.now,
            kind=HistoryKind.GROW,
            role=role,
            pods=tuple(names),
            action=ScaleOperation.SCALE_OUT,
            scale_from=before,
            scale_to=before + len(names),
            reason=reason,
        )
        cycle.record(entry)
        cycle.scale_message("scaleout", role, names)
        cycle.emit(EventType.NORMAL, "Scaling", reason)


_CAPACITY = frozenset(kind.value for kind in CAPACITY_FAULTS)


def _free_slots(cycle: Cycle) -> int:
    """Room for more pods on Ready nodes; a Ready node that cannot tell is taken to have room for one."""
    return sum(
        (node.free_slots if node.free_slots is not None else 1) for node in cycle.observed.nodes if node.ready
    )


#: How long a ready worker of a Horovod job waits to be listed for the other workers starting with it.
JOIN_TOGETHER_S = 60.0
#: A worker relaunched this soon (its backoff about to end) counts as starting already.
_ABOUT_TO_START_S = 5.0


def update_discovery(cycle: Cycle) -> None:
    """Horovod jobs: one ``host:slots`` line per running worker pod, rewritten whenever that set changes.

    A pod is listed once it is ready as well as running (on Kubernetes, once its sshd accepts connections:
    ``backends.k8s.ssh.readiness_probe``): horovodrun starts a worker on a new host at once, by ssh, and
    blacklists for good a host where that fails, so a replacement listed while its sshd still started would
    never be taken back. Once listed, a pod stays listed while it runs, ready or not: dropping it from the
    list would make Horovod stop a worker that trains.

    Workers that start together are listed together (``discovery_held_until``): Horovod 0.28.1's workers drop
    a host update that reaches them during a reset (``State.on_reset`` empties its queue) and horovodrun
    sends each update once, so a replacement listed while Horovod resets for the one listed before it was
    never taken in (seen with both cores busy: three replacements after a node's loss, Horovod back at 3 of
    4 for good). A lost pod leaves the list at once."""
    if cycle.job.spec.framework_type is not FrameworkType.HOROVOD:
        return
    slots_per_host = cycle.job.spec.elastic.n_proc_per_node if cycle.job.spec.elastic else 1
    per_host = slots_per_host if isinstance(slots_per_host, int) else 1
    listed = {host.rpartition(":")[0] for host in cycle.get("discovery")}
    held = discovery_held_until(cycle, listed) is not None
    hosts = tuple(
        f"{slot.name}:{per_host}"
        for slot in cycle.ordered_slots()
        if slot.phase is PodPhase.RUNNING
        and not is_launcher(cycle, slot.role)
        and (slot.name in listed or (not held and _ready(cycle, slot)))
    )
    if hosts == cycle.get("discovery"):
        return
    version = cycle.get("discovery_version") + 1
    cycle.updates.update(discovery=hosts, discovery_version=version)
    cycle.issue(UpdateDiscovery(keys.discovery(cycle.job, version), version, hosts))


def discovery_held_until(cycle: Cycle, listed: set[str] | None = None) -> float | None:
    """Until when a Horovod job's ready, unlisted workers wait for its other starting workers (None: they
    do not wait). A worker is starting when it is due within seconds, launched, or running but not ready;
    each holds the others for ``JOIN_TOGETHER_S`` from its launch at most, so that a pod that cannot be
    placed delays no one for long."""
    if cycle.job.spec.framework_type is not FrameworkType.HOROVOD:
        return None
    if listed is None:
        listed = {host.rpartition(":")[0] for host in cycle.get("discovery")}
    ready_unlisted = False
    until: float | None = None
    for slot in cycle.slots.values():
        if slot.name in listed or is_launcher(cycle, slot.role):
            continue
        if slot.phase is PodPhase.RUNNING and _ready(cycle, slot):
            ready_unlisted = True
            continue
        if slot.phase is PodPhase.WAITING:
            since = (
                slot.due_at
                if slot.due_at is not None and slot.due_at <= cycle.now + _ABOUT_TO_START_S
                else None
            )
        elif slot.phase in (PodPhase.PENDING, PodPhase.CREATING, PodPhase.RUNNING):
            since = slot.launched_at if slot.launched_at is not None else cycle.now
        else:
            since = None
        if since is not None and cycle.now < since + JOIN_TOGETHER_S:
            until = max(until or 0.0, since + JOIN_TOGETHER_S)
    return until if ready_unlisted else None


def _ready(cycle: Cycle, slot: PodStatus) -> bool:
    """The slot's current pod is ready (a backend that does not tell readiness reports every pod ready)."""
    return any(
        pod.generation == slot.generation and pod.ready and not pod.terminating
        for pod in cycle.observed_pods(slot.name)
    )


def is_launcher(cycle: Cycle, role: str) -> bool:
    """A Horovod job's launcher role (it runs horovodrun; the other roles' pods are Horovod's hosts)."""
    return is_leader(cycle.job, role)
