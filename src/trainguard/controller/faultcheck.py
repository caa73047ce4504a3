"""The fault tolerance check in the engine: what the pods' agents found, carried into the job's status, and
the decisions of ``trainguard.policy.faultcheck`` carried out (docs/faultcheck.md).

- ``decide_check``: a pod ended by a failed check (``HardwareFault``, ``PreCheckFailed``) is decided by the
  check's rule, with its node's isolation weighed first (the node is the backend's word: the node the pod was
  bound to, never one the pod names); ``carry_out_check`` isolates the node (``IsolateNode``, an ``isolate``
  history entry, a Warning Event) where the cluster lets a job's checks isolate (``IsolationMode.AGENTS``),
  and notes the pods issued again;
- ``check_of``: the check a fault's history entry carries (the failed one; a post-check that passed makes a
  fault of the user's code scenario 4);
- ``record_checks``: each node's latest check in the status, and a Warning Event for a periodic check that
  found the environment wanting (which ends nothing);
- ``reissue_deadlines``: a pod issued again that still waits for resources past its timeout ends the job.
"""

from __future__ import annotations

from dataclasses import replace

from trainguard.controller import keys
from trainguard.controller.backend import EventType, IsolateNode, IsolationMode, ObservedPod
from trainguard.controller.cycle import Cycle
from trainguard.controller.phases import PodPhase
from trainguard.controller.reports import AgentReport
from trainguard.controller.status import (
    MAX_CHECKED_NODES,
    CheckFinding,
    CheckRecord,
    FaultCheckStatus,
    HistoryEntry,
    HistoryKind,
    IsolationOutcome,
    LinkRecord,
)
from trainguard.pod import checks
from trainguard.policy.faultcheck import (
    CHECK_FAULTS,
    ISOLATING,
    Link,
    decide_check_fault,
    enabled,
    isolation,
    policy_of,
    reissue_expired,
    scenario,
    slow_link,
)
from trainguard.policy.types import Decision, Fault, FaultKind, Remedy

_EMPTY = FaultCheckStatus()
BANDWIDTH = "net.bandwidth"
#: The limits whose refusal leaves a node not isolated.
ISOLATION_LIMITS = frozenset({"faultCheck.maxIsolatedShare", "faultCheck.maxIsolations"})
#: Why a job's check isolates no node, where its cluster's mode says so.
UNISOLATED = {
    IsolationMode.OFF: "isolation is off on this cluster (the operator's --no-isolation)",
    IsolationMode.NODE_CHECKER: "on this cluster only the node checker isolates nodes (the operator's "
    "--isolation-mode node-checker); a job's own checks issue its pods again elsewhere",
}


def status_of(cycle: Cycle) -> FaultCheckStatus:
    return cycle.get("fault_check") or _EMPTY


def _put(cycle: Cycle, **changes: object) -> FaultCheckStatus:
    updated = status_of(cycle).model_copy(update=changes)
    cycle.updates["fault_check"] = updated
    return updated


def is_check_fault(cycle: Cycle, fault: Fault) -> bool:
    return fault.kind in CHECK_FAULTS and fault.pod is not None and enabled(cycle.job)


def record(result: checks.CheckResult, pod: str | None, node: str | None, found: int | None) -> CheckRecord:
    return CheckRecord(
        phase=result.phase,
        at=result.at,
        verdict=result.verdict,
        pod=pod,
        node=node,
        seconds=result.seconds,
        scenario=found,
        failed=tuple(
            CheckFinding(
                name=item.name,
                verdict=item.verdict,
                value=item.value,
                threshold=item.threshold,
                detail=item.detail,
            )
            for item in result.failed
        ),
        items=len(result.items),
    )


def _isolated(cycle: Cycle) -> set[str]:
    """The nodes isolated now: as observed, and those this job isolated (an observation may lag)."""
    return set(cycle.observed.isolated_nodes) | set(status_of(cycle).isolated)


def decide_check(cycle: Cycle, fault: Fault, pod: ObservedPod | None) -> tuple[Decision, CheckRecord | None]:
    """The decision for a fault of a check, and the check it records."""
    failed = _agent(pod).failed_check if pod is not None else None
    phase = failed.phase if failed is not None else None
    refusal = None
    mode = cycle.observed.isolation
    if fault.kind in ISOLATING and fault.node and mode is IsolationMode.AGENTS:
        allowed = isolation(
            [fault.node],
            cluster_nodes=max(cycle.observed.node_count or len(cycle.observed.nodes), 1),
            isolated=_isolated(cycle),
            by_job=len(status_of(cycle).isolated),
            policy=policy_of(cycle.job),
        )
        refusal = allowed.refused[0] if allowed.refused else None
    decision = decide_check_fault(
        cycle.job, fault, phase, status_of(cycle).reissues, refusal, UNISOLATED.get(mode)
    )
    name = cycle.name_of(fault.pod) if fault.pod is not None else None
    found = int(scenario(fault.kind, phase))
    checked = record(failed, name, fault.node, found) if failed is not None else None
    return decision, checked


def carry_out_check(cycle: Cycle, decision: Decision, checked: CheckRecord | None) -> None:
    """Isolate the node of a hardware fault (or record why not), and note the pods issued again."""
    fault = decision.fault
    state = status_of(cycle)
    if decision.action is Remedy.RESTART:
        waiting = dict(state.waiting)
        for ref in decision.pods:
            waiting[cycle.name_of(ref)] = cycle.now
        state = _put(cycle, reissues=state.reissues + 1, waiting=waiting)
    node = fault.node
    if fault.kind not in ISOLATING or not node or node in _isolated(cycle):
        return
    unisolated = UNISOLATED.get(cycle.observed.isolation)
    if unisolated is not None:
        reason = f"node {node} not isolated: {unisolated}"
        cycle.emit(
            EventType.WARNING, "NodeNotIsolated", reason, cycle.name_of(fault.pod) if fault.pod else None
        )
        return
    pod = cycle.name_of(fault.pod) if fault.pod is not None else ""
    item = checked.failed[0] if checked is not None and checked.failed else None
    what = (
        f"{item.name} read {item.value:g} (threshold {item.threshold:g})"
        if item is not None and item.value is not None and item.threshold is not None
        else (item.name if item is not None else fault.message or "its check")
    )
    # Refused by a bound on isolations (the job fails for it); a job that fails for its reissues still isolates
    # the faulty node, for the jobs after it.
    refused = decision.action is Remedy.FAIL_JOB and decision.limit in ISOLATION_LIMITS
    if refused:
        reason = f"node {node} not isolated: {decision.reason}"
    else:
        reason = f"node {node} isolated: the check of {pod} (job {cycle.job.name}) found {what}"
        cycle.issue(
            IsolateNode(
                keys.isolate(cycle.job, node),
                node=node,
                pod=pod,
                item=item.name if item is not None else "",
                value=item.value if item is not None else None,
                threshold=item.threshold if item is not None else None,
                reason=reason,
            )
        )
        _put(cycle, isolated=(*state.isolated, node))
    cycle.record(
        HistoryEntry(
            at=cycle.now,
            kind=HistoryKind.ISOLATE,
            role=fault.pod.role if fault.pod is not None else None,
            pod=pod,
            node=node,
            fault=fault.kind,
            rule=decision.rule,
            action=IsolationOutcome.REFUSED if refused else IsolationOutcome.ISOLATED,
            reason=reason,
            check=checked,
        )
    )
    cycle.emit(EventType.WARNING, "NodeNotIsolated" if refused else "NodeIsolated", reason, pod)


def check_of(cycle: Cycle, fault: Fault, pod: ObservedPod | None) -> CheckRecord | None:
    """The check a fault of the user's code carries: the post-check that followed it, which found the node
    healthy (scenario 4); None where there was none."""
    if pod is None or fault.kind is not FaultKind.EXITED or fault.exit_code == 0:
        return None
    latest = _agent(pod).last_check
    if latest is None or latest.phase != checks.POST or latest.verdict != checks.OK:
        return None
    return record(
        latest, cycle.name_of(fault.pod) if fault.pod else None, fault.node, int(scenario(fault.kind, None))
    )


def record_checks(cycle: Cycle) -> None:
    """Each node's latest check, as the job's pods report them; a periodic check that found the environment
    wanting is a Warning Event (it ends nothing: a full disk may be freed)."""
    if not enabled(cycle.job):
        return
    state = status_of(cycle)
    latest = {entry.node: entry for entry in state.nodes if entry.node}
    changed = False
    for pod in cycle.observed.pods:
        agent = pod.agent
        result = agent.last_check if agent is not None else None
        if result is None or not pod.node:
            continue
        known = latest.get(pod.node)
        if known is not None and known.at >= result.at:
            continue
        latest[pod.node] = record(result, pod.name, pod.node, None)
        changed = True
        if result.phase == checks.PERIODIC and result.verdict == checks.ENVIRONMENT:
            failed = ", ".join(item.name for item in result.failed)
            cycle.emit(
                EventType.WARNING,
                "CheckWarning",
                f"the periodic check of {pod.name} on node {pod.node} found {failed} wanting",
                pod.name,
            )
    if changed:
        newest = sorted(latest.values(), key=lambda entry: entry.at)[-MAX_CHECKED_NODES:]
        _put(cycle, nodes=tuple(sorted(newest, key=lambda entry: entry.node or "")))
    _record_links(cycle)


def _record_links(cycle: Cycle) -> None:
    """Each pod's bandwidth probe (its pre-check's ``net.bandwidth``), and the slowest pod named where it is
    well below its role's others (``slow_link``): a Warning Event ``SlowLink``, once per pod named."""
    state = status_of(cycle)
    links = {link.pod: link for link in state.links}
    roles = {pod.name: pod.role for pod in cycle.observed.pods}
    changed = False
    for pod in cycle.observed.pods:
        result = pod.agent.last_check if pod.agent is not None else None
        if result is None or result.phase != checks.PRE:
            continue
        item = next((item for item in result.items if item.name == BANDWIDTH), None)
        if item is None or item.value is None:
            continue
        if pod.name not in links or links[pod.name].mbps != item.value or links[pod.name].node != pod.node:
            links[pod.name] = LinkRecord(pod=pod.name, node=pod.node, mbps=item.value)
            changed = True
    if not changed:
        return
    kept = tuple(sorted(links.values(), key=lambda link: link.pod)[:MAX_CHECKED_NODES])
    found = slow_link(Link(link.pod, roles.get(link.pod, ""), link.mbps) for link in kept)
    slowest = state.slow_link
    if found is not None:
        named, median = found
        slowest = LinkRecord(pod=named.pod, node=links[named.pod].node, mbps=named.mbps, median=median)
        if state.slow_link is None or state.slow_link.pod != named.pod:
            cycle.emit(
                EventType.WARNING,
                "SlowLink",
                f"the bandwidth probe found {named.pod} (node {slowest.node}) the slowest: {named.mbps:.1f} "
                f"MB/s to the next pod of its role, where the role's median is {median:.1f} MB/s",
                named.pod,
            )
    _put(cycle, links=kept, slow_link=slowest)


def reissue_deadlines(cycle: Cycle) -> None:
    """Pods issued again that run now are no longer waited for; one that waited past its timeout ends the
    job (``reissue_expired``)."""
    waiting = status_of(cycle).waiting
    if not waiting:
        return
    still: dict[str, float] = {}
    for name, at in waiting.items():
        slot = cycle.slots.get(name)
        if slot is None or slot.phase not in (PodPhase.WAITING, PodPhase.PENDING):
            continue
        still[name] = at
        reason = reissue_expired(cycle.job, at, cycle.now)
        if reason is not None and cycle.state.job_failure is None:
            cycle.state = replace(cycle.state, job_failure=f"{name}: {reason}")
            cycle.emit(EventType.WARNING, "ReissueTimeout", f"{name}: {reason}", name)
    if still != waiting:
        _put(cycle, waiting=still)


def reissue_wake_at(cycle: Cycle) -> float | None:
    """When the next pod still waited for (``reissue_deadlines`` left it) times out, or None."""
    limit = policy_of(cycle.job).reissue_timeout_seconds
    return min((at + limit for at in status_of(cycle).waiting.values()), default=None)


def _agent(pod: ObservedPod) -> AgentReport:
    return pod.agent or _NO_REPORT


_NO_REPORT = AgentReport()
