"""The node checker's checks, decided: which nodes it isolates (docs/faultcheck.md, "Trust").

Where the cluster's administrator chose the node checker (``IsolationMode.NODE_CHECKER``: the chart's
``nodeChecker.enabled``), a job's own checks isolate nothing: its agent shares its pod with the user's code,
which could forge what it reports. The node checker runs the same checks from a pod of its own on every node (a
DaemonSet of the operator's image), and only its results isolate. Each ``NodeCheck`` here is one checker pod's
latest check, on the node the API server bound that pod to.

Decided once, for the operator's leader (pure: the checks, the isolated nodes and what was acted on before in,
the verdicts out):

- a node whose latest check found its hardware faulty is isolated, once per check (``acted``: a node an
  administrator released is not isolated again by the check that isolated it, only by a later one that fails);
- never more than ``share`` of the cluster's nodes (at least one), as a job's checks are bounded: a node past it
  is refused, with the reason, and its next failing check is weighed again;
- nothing else: a check that passed, or found only the environment wanting (a check that timed out), changes
  nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from trainguard.pod.checks import HARDWARE, CheckItem, CheckResult
from trainguard.policy.faultcheck import isolation_bound


@dataclass(frozen=True)
class NodeCheck:
    """The latest check of one node checker pod: ``node`` is the node the API server bound that pod to."""

    node: str
    checker: str
    result: CheckResult


@dataclass(frozen=True)
class Verdict:
    """A node the checker's check found faulty: isolated (``refused`` None), or not, and why; the failed item
    (the first), with its value and threshold."""

    node: str
    checker: str
    #: When the check ran (the checker's clock): what ``acted`` remembers.
    at: float
    item: str
    value: float | None
    threshold: float | None
    reason: str
    refused: str | None = None


@dataclass(frozen=True)
class Verdicts:
    """What ``decide`` found: the nodes to isolate, those refused, and the checks that need nothing (the node
    is isolated already), all of which count as acted on."""

    isolate: tuple[Verdict, ...] = ()
    refused: tuple[Verdict, ...] = ()
    settled: Mapping[str, float] = field(default_factory=dict)


def latest(checks: Iterable[NodeCheck]) -> dict[str, NodeCheck]:
    """Each node's latest check (two checker pods on a node, while the DaemonSet rolls: the newer check)."""
    found: dict[str, NodeCheck] = {}
    for check in checks:
        known = found.get(check.node)
        if known is None or (check.result.at, check.checker) > (known.result.at, known.checker):
            found[check.node] = check
    return found


def decide(
    checks: Iterable[NodeCheck],
    *,
    cluster_nodes: int,
    isolated: Iterable[str],
    share: float,
    acted: Mapping[str, float],
) -> Verdicts:
    """The nodes to isolate now: those whose latest check (``latest``) found faulty hardware and was not acted
    on before (``acted``: node -> the time of the last check acted on), not isolated yet, within ``share`` of
    ``cluster_nodes`` (``isolated``: the nodes isolated now, by anyone), the oldest check first."""
    already = set(isolated)
    bound = isolation_bound(max(cluster_nodes, 1), share)
    isolate: list[Verdict] = []
    refused: list[Verdict] = []
    settled: dict[str, float] = {}
    fresh = [
        check
        for check in latest(checks).values()
        if check.result.verdict == HARDWARE and check.result.at > acted.get(check.node, float("-inf"))
    ]
    for check in sorted(fresh, key=lambda check: (check.result.at, check.node)):
        if check.node in already:
            settled[check.node] = check.result.at
            continue
        item = next(item for item in check.result.items if item.verdict == HARDWARE)
        found = _found(check, item)
        if len(already) + len(isolate) >= bound:
            why = (
                f"it would isolate more than {share:.0%} of the cluster's {cluster_nodes} nodes (the node "
                f"checker's bound, --node-checker-max-isolated-share: at most {bound}, {len(already)} isolated "
                "now)"
            )
            refused.append(_verdict(check, item, f"node {check.node} not isolated: {found}, but {why}", why))
        else:
            isolate.append(_verdict(check, item, f"node {check.node} isolated: {found}"))
    return Verdicts(tuple(isolate), tuple(refused), settled)


def _found(check: NodeCheck, item: CheckItem) -> str:
    read = (
        f"{item.name} read {item.value:g} (threshold {item.threshold:g})"
        if item.value is not None and item.threshold is not None
        else item.name
    )
    return f"the node checker's check ({check.checker}) found {read}"


def _verdict(check: NodeCheck, item: CheckItem, reason: str, refused: str | None = None) -> Verdict:
    return Verdict(
        node=check.node,
        checker=check.checker,
        at=check.result.at,
        item=item.name,
        value=item.value,
        threshold=item.threshold,
        reason=reason,
        refused=refused,
    )
