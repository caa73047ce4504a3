"""The fault tolerance check, decided (ModelArts' Training Job Fault Tolerance Check; docs/faultcheck.md).

The agent in each pod checks its node before the training command starts (pre-check), while it runs
(periodic) and after it failed (post-check); what it found reaches the controller as the pod's end: a
``HardwareFault`` or a ``PreCheckFailed``. Here, once, for every backend:

- which of ModelArts' four scenarios a fault is (``scenario``): (1) the pre-check failed on faulty hardware:
  isolate the node, issue the pod again elsewhere; (2) the pre-check failed on working hardware (a full disk,
  an unreachable rendezvous): issue it again elsewhere, isolate nothing; (3) a hardware fault ended the
  user's process: isolate, issue again; (4) the user's code failed on healthy hardware: the job's own policy
  decides, as without the check;
- what is done about a check's fault (``decide_check_fault``): issued again off the node, not counted toward
  the job's restart limits (the user's code did nothing wrong), at most ``maxReissues`` times;
- which nodes are isolated (``isolation``): never more than ``maxIsolatedShare`` of the cluster's nodes (at
  least one) nor ``maxIsolations`` for one job, so that a broken check cannot cordon a cluster; a node it may
  not isolate fails the job, with the reason;
- when a pod issued again has waited too long for resources (``reissue_expired``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from trainguard.api import RestartScope, TrainingJob
from trainguard.api.faultcheck import ANNOTATION, FaultCheckPolicy
from trainguard.api.model import RestartPolicy
from trainguard.pod.checks import Ring, Settings
from trainguard.policy.roles import canonical, pods_in_scope, resolve_role
from trainguard.policy.types import RULE_FAULT_CHECK, Decision, Fault, FaultKind, Remedy
from trainguard.policy.words import seconds, what_happened

#: The faults a failed check ends a pod with.
CHECK_FAULTS = frozenset({FaultKind.HARDWARE_FAULT, FaultKind.PRE_CHECK_FAILED, FaultKind.STRAGGLER})
#: ... and those that isolate the pod's node.
ISOLATING = frozenset({FaultKind.HARDWARE_FAULT, FaultKind.STRAGGLER})
_DEFAULT = FaultCheckPolicy()


class Scenario(IntEnum):
    """ModelArts' four scenarios of a fault tolerance check."""

    PRE_CHECK_HARDWARE = 1
    PRE_CHECK_ENVIRONMENT = 2
    HARDWARE_WHILE_RUNNING = 3
    USER_CODE = 4

    @property
    def words(self) -> str:
        return _WORDS[self]


_WORDS = {
    Scenario.PRE_CHECK_HARDWARE: "the pre-check failed and the hardware is faulty: the node is isolated and "
    "the pod issued again",
    Scenario.PRE_CHECK_ENVIRONMENT: "the pre-check failed on working hardware: the pod is issued again on "
    "another node, nothing isolated",
    Scenario.HARDWARE_WHILE_RUNNING: "a hardware fault ended the training process: the node is isolated and "
    "the pod issued again",
    Scenario.USER_CODE: "the check found the node healthy: the job's policy decides, as for any fault of the "
    "training code",
}


#: The words of the scenarios that isolate, where a job's checks isolate nothing (``decide_check_fault``).
_UNISOLATED = {
    Scenario.PRE_CHECK_HARDWARE: "the pre-check failed and found the hardware faulty: the pod is issued again "
    "on another node",
    Scenario.HARDWARE_WHILE_RUNNING: "a hardware fault ended the training process: the pod is issued again on "
    "another node",
}


def policy_of(job: TrainingJob) -> FaultCheckPolicy:
    return job.spec.fault_check or _DEFAULT


def enabled(job: TrainingJob) -> bool:
    """On where the job says so (its ``trainguard.io/fault-check`` annotation, then ``faultCheck.enabled``),
    else wherever its policy restarts on faults."""
    word = job.metadata.annotations.get(ANNOTATION, "").strip().lower()
    if word in ("true", "false"):
        return word == "true"
    chosen = policy_of(job).enabled
    if chosen is not None:
        return chosen
    return restarts_on_faults(job)


def restarts_on_faults(job: TrainingJob) -> bool:
    """Some rule of the job restarts a pod after a fault: a role's restartPolicy, a faultTolerantPolicy
    entry, or a job retry."""
    spec = job.spec
    if spec.job_retry is not None and (spec.job_retry.retry_num or spec.job_retry.unconditional):
        return True
    for role in spec.replica_specs.values():
        if role.restart_policy is not RestartPolicy.NEVER:
            return True
        if spec.fault_tolerant and any(
            entry.effective_restart_policy is not RestartPolicy.NEVER for entry in role.fault_tolerant_policy
        ):
            return True
    return False


def scenario(kind: FaultKind, phase: str | None) -> Scenario:
    """Which scenario a pod's fault is: ``phase`` is the failed check's (``pre``, ``periodic``, ``post``)."""
    if kind is FaultKind.PRE_CHECK_FAILED:
        return Scenario.PRE_CHECK_ENVIRONMENT
    if kind is FaultKind.HARDWARE_FAULT:
        return Scenario.PRE_CHECK_HARDWARE if phase == "pre" else Scenario.HARDWARE_WHILE_RUNNING
    if kind is FaultKind.STRAGGLER:  # slow hardware, found while the job runs
        return Scenario.HARDWARE_WHILE_RUNNING
    return Scenario.USER_CODE


def decide_check_fault(
    job: TrainingJob,
    fault: Fault,
    phase: str | None,
    reissues: int,
    refused: Refusal | None = None,
    unisolated: str | None = None,
) -> Decision:
    """The decision for a ``HardwareFault`` or ``PreCheckFailed``: the pod is issued again off its node (a
    pre-check's pod alone, the command never ran; after a fault while running, with the scope the job's
    rules give a lost node), not counted toward restart limits. The job fails past ``maxReissues``, or
    where its node may not be isolated (``refused``, from ``isolation``). ``unisolated``: why a job's check
    isolates no node on this cluster (isolation off, or only the node checker isolates), said in the reason
    of a fault that would otherwise isolate."""
    if fault.pod is None or fault.kind not in CHECK_FAULTS:
        raise ValueError(f"not a fault of a check: {fault.kind.value}")
    policy = policy_of(job)
    pod = canonical(job, fault.pod)
    found = scenario(fault.kind, phase)
    if unisolated is not None and fault.kind in ISOLATING:
        opening = f"{what_happened(fault)}: {_UNISOLATED[found]}; the node is not isolated: {unisolated}"
    else:
        opening = f"{what_happened(fault)}: {found.words}"
    if refused is not None:
        return Decision(
            fault,
            Remedy.FAIL_JOB,
            None,
            RULE_FAULT_CHECK,
            False,
            f"{what_happened(fault)}, but isolating node {refused.node} {refused.why}; the job fails",
            pods=(pod,),
            permanent=True,
            limit=refused.limit,
        )
    if reissues >= policy.max_reissues:
        return Decision(
            fault,
            Remedy.FAIL_JOB,
            None,
            RULE_FAULT_CHECK,
            False,
            f"{opening}, but pods were issued again {reissues} times after failed checks "
            f"(faultCheck.maxReissues {policy.max_reissues}); the job fails",
            pods=(pod,),
            permanent=True,
            limit="faultCheck.maxReissues",
        )
    scope = RestartScope.POD if phase == "pre" else _lost_node_scope(job, pod.role)
    return Decision(
        fault,
        Remedy.RESTART,
        scope,
        RULE_FAULT_CHECK,
        False,
        f"{opening} (scope {scope.value}; issue again {reissues + 1} of faultCheck.maxReissues "
        f"{policy.max_reissues}); not counted toward restart limits",
        pods=pods_in_scope(job, pod, scope),
        replace_node=True,
    )


def _lost_node_scope(job: TrainingJob, role: str) -> RestartScope:
    """The scope the job's rules give a pod whose node is lost (its nodeNotReady entry, else the role's)."""
    _, spec = resolve_role(job, role)
    for entry in spec.fault_tolerant_policy if job.spec.fault_tolerant else ():
        events = entry.exceptional_event or ()
        if any(event.value == "nodeNotReady" for event in events):
            return entry.restart_scope
    return spec.restart_scope


@dataclass(frozen=True)
class Refusal:
    """A node ``isolation`` may not isolate: why, and the field whose bound it would pass."""

    node: str
    why: str
    limit: str


@dataclass(frozen=True)
class Isolation:
    """What ``isolation`` allows: the nodes to isolate now, and those refused (each fails its job)."""

    isolate: tuple[str, ...]
    refused: tuple[Refusal, ...] = ()


def isolation_bound(cluster_nodes: int, share: float) -> int:
    """The most nodes checks may isolate in a cluster of ``cluster_nodes``: the share, at least one."""
    return max(1, math.floor(share * cluster_nodes + 1e-9))


def isolation(
    wanted: Iterable[str],
    *,
    cluster_nodes: int,
    isolated: Iterable[str],
    by_job: int,
    policy: FaultCheckPolicy,
) -> Isolation:
    """The nodes among ``wanted`` (whose checks found faulty hardware) to isolate now: those not isolated
    yet, within the cluster's bound (``isolated``: the nodes isolated now, by any job) and the job's
    (``by_job``: nodes this job isolated before)."""
    already = set(isolated)
    bound = isolation_bound(cluster_nodes, policy.max_isolated_share)
    chosen: list[str] = []
    refused: list[Refusal] = []
    for node in dict.fromkeys(wanted):
        if node in already:
            continue
        if len(already) + len(chosen) >= bound:
            why = (
                f"would isolate more than {policy.max_isolated_share:.0%} of the cluster's {cluster_nodes} "
                f"nodes (faultCheck.maxIsolatedShare: at most {bound}, {len(already)} isolated now)"
            )
            refused.append(Refusal(node, why, "faultCheck.maxIsolatedShare"))
        elif by_job + len(chosen) >= policy.max_isolations:
            why = f"would pass this job's limit (faultCheck.maxIsolations {policy.max_isolations})"
            refused.append(Refusal(node, why, "faultCheck.maxIsolations"))
        else:
            chosen.append(node)
    return Isolation(tuple(chosen), tuple(refused))


def reissue_expired(job: TrainingJob, reissued_at: float, now: float) -> str | None:
    """The reason a pod issued again at ``reissued_at`` and still waiting for resources ends the job, once
    ``reissueTimeoutSeconds`` have passed (at exactly the limit); else None."""
    limit = policy_of(job).reissue_timeout_seconds
    if now - reissued_at < limit:
        return None
    return (
        f"a pod issued again after a failed check has waited {seconds(now - reissued_at)} for resources "
        f"(faultCheck.reissueTimeoutSeconds {seconds(limit)}); the job fails"
    )


def settings(
    job: TrainingJob, role: str, rendezvous: str | None, ring: Ring | None = None
) -> Settings | None:
    """What the agents of ``role``'s pods are told about their checks (``contract.ENV_FAULT_CHECK``); None
    where the check is off."""
    if not enabled(job):
        return None
    policy = policy_of(job)
    return Settings(
        period=policy.period_seconds,
        timeout=policy.timeout_seconds,
        thresholds=dict(policy.thresholds),
        disabled=policy.disabled_items,
        disk=dict(policy.disk),
        gpus=_gpus(job, role),
        rendezvous=rendezvous or None,
        stragglers=policy.stragglers.enabled,
        ring=ring,
    )


def _gpus(job: TrainingJob, role: str) -> int:
    """The GPUs a pod of ``role`` asks for: its containers' ``nvidia.com/gpu`` limits (else requests)."""
    _, spec = resolve_role(job, role)
    pod = spec.template.get("spec") or {}
    total = 0
    for container in pod.get("containers") or () if isinstance(pod, dict) else ():
        resources = container.get("resources") or {} if isinstance(container, dict) else {}
        for part in ("limits", "requests"):
            value = (resources.get(part) or {}).get("nvidia.com/gpu")
            if value is not None:
                total += int(value) if str(value).isdigit() else 0
                break
    return total


#: A pod whose probe sent less than this share of its role's median is named the slowest link.
SLOW_LINK_SHARE = 0.5


@dataclass(frozen=True)
class Link:
    """One pod's bandwidth probe: MB/s to the next pod of its role."""

    pod: str
    role: str
    mbps: float


def slow_link(links: Iterable[Link], share: float = SLOW_LINK_SHARE) -> tuple[Link, float] | None:
    """The slowest pod of a role whose probe sent less than ``share`` of that role's median, with the median;
    the slowest of all such roles' where several have one. None where no role has two probes, or none is that
    slow (a ring's links are alike: one far below the others is its pod's link, or the next pod's)."""
    by_role: dict[str, list[Link]] = {}
    for link in links:
        by_role.setdefault(link.role, []).append(link)
    found: list[tuple[Link, float]] = []
    for role_links in by_role.values():
        if len(role_links) < 2:
            continue
        values = sorted(link.mbps for link in role_links)
        middle = len(values) // 2
        median = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
        slowest = min(role_links, key=lambda link: (link.mbps, link.pod))
        if slowest.mbps < share * median:
            found.append((slowest, median))
    return min(found, key=lambda pair: pair[0].mbps / max(pair[1], 1e-9), default=None)
