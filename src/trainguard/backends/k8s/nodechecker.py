"""The node checker (trusted mode, off by default; docs/faultcheck.md, "Trust"): the fault tolerance check's
items run from a pod of the chart's own DaemonSet on every node, and only its results may isolate a node.

- **The checker** (``trainguard node-checker``, ``run``): every ``period`` seconds, ``run_check`` with this
  machine's readings (the GPU items over every device NVML lists here, ``node_settings``; no GPU: skipped), the
  test aid's injected items read again each time, and the result, as JSON, in its own pod's annotation
  ``ANNOTATION`` (``publish``). It runs in the operator's namespace, from the operator's image, under a
  ServiceAccount of its own that may patch pods there: nothing a job's user runs can write it.
- **The operator** (``trusted_checks``): the checks of the pods that are the checker's, and of no other (in
  its namespace, owned by its DaemonSet, run under its ServiceAccount, no job's pod), each on the node the API
  server bound that pod to (``spec.nodeName``), never a node the checker writes. The engine decides
  (``trainguard.policy.nodechecks``); ``carry_out`` isolates (the Node's annotation and Event name the checker)
  or says why not (a Warning Event ``NodeNotIsolated`` on the Node).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainguard.backends.k8s import isolation, metadata
from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.metadata import LABEL_JOB
from trainguard.controller.backend import IsolationMode
from trainguard.pod.checks import PERIODIC, CheckResult, Settings
from trainguard.policy.nodechecks import NodeCheck, Verdicts, decide

# The checker's side (``run``) alone reads a node: the operator never imports the agent's checks.
if TYPE_CHECKING:
    from trainguard.agent.checks.readings import Readings

Obj = dict[str, Any]
log = logging.getLogger(__name__)

#: The checker's latest check, as JSON (``CheckResult.as_dict``), on its own pod.
ANNOTATION = metadata.ANNOTATION_NODE_CHECK
#: The label every checker pod carries (the chart's DaemonSet sets it): what the operator watches.
NAME_LABEL = "app.kubernetes.io/name"
NAME_VALUE = "trainguard-node-checker"
#: The checker's DaemonSet and ServiceAccount, by default (the chart's, for its release ``trainguard``).
DEFAULT_NAME = "trainguard-node-checker"
#: Where the checker finds its own pod (the downward API, as the chart's DaemonSet gives them).
ENV_POD_NAME = "POD_NAME"
ENV_POD_NAMESPACE = "POD_NAMESPACE"
#: The longest NVML may take to count the devices when the checker starts.
COUNT_TIMEOUT = 30.0


@dataclass(frozen=True)
class NodeChecker:
    """Which pods are the node checker's (``namespace``, ``name``: its DaemonSet's and ServiceAccount's), and
    the most of the cluster's nodes its checks may isolate."""

    namespace: str = "default"
    name: str = DEFAULT_NAME
    max_isolated_share: float = 0.1

    @property
    def pods_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods"

    @property
    def label_selector(self) -> str:
        return f"{NAME_LABEL}={NAME_VALUE}"


# ---- the checker -------------------------------------------------------------------------------------------


def node_settings(readings: Readings, period: float, timeout: float) -> Settings:
    """The checker's settings: its GPU items over every device NVML lists here when it starts (``gpu.count``
    then fails when fewer are listed later); 0 (no GPU, no driver, or no answer within ``COUNT_TIMEOUT``):
    they are skipped. No directory, rendezvous or ring: those items are a job's."""
    counted: list[int] = []

    def count() -> None:
        try:
            counted.append(readings.gpus().count)
        except Exception:  # no driver, no device: no GPU item to check
            counted.append(0)

    worker = threading.Thread(target=count, name="trainguard-gpu-count", daemon=True)
    worker.start()
    worker.join(min(COUNT_TIMEOUT, timeout))
    return Settings(period=period, timeout=timeout, gpus=counted[0] if counted else 0)


def publish(kube: Kube, namespace: str, pod: str, result: CheckResult) -> None:
    """The check in the checker pod's own annotation (``ANNOTATION``)."""
    text = json.dumps(result.as_dict(), separators=(",", ":"))
    kube.patch(
        f"/api/v1/namespaces/{namespace}/pods/{pod}", {"metadata": {"annotations": {ANNOTATION: text}}}
    )


def run(
    settings: Settings,
    readings: Readings,
    publish: Callable[[CheckResult], None],
    injected: Callable[[], Collection[str]],
    stop: threading.Event,
    *,
    once: bool = False,
) -> int:
    """Check the node every ``settings.period`` seconds until ``stop`` (one check where ``once``), publishing
    each result; a result that cannot be published is said on stderr and the next check tries again. Returns
    the exit status: 1 where ``once`` could not publish."""
    from trainguard.agent.checks.run import run_check

    while True:
        result = run_check(settings, PERIODIC, readings, injected())
        try:
            publish(result)
        except (ApiError, OSError) as error:
            log.warning("cannot publish the check (%s); the next check tries again", error)
            if once:
                return 1
        else:
            log.info("check %s in %.2f s%s", result.verdict, result.seconds, _failed(result))
        if once or stop.wait(settings.period):
            return 0


def _failed(result: CheckResult) -> str:
    return "".join(f"; {item.name} {item.verdict}: {item.value} ({item.detail})" for item in result.failed)


# ---- the operator ------------------------------------------------------------------------------------------


def is_checker(pod: Obj, checker: NodeChecker) -> bool:
    """Whether ``pod`` is one of the checker's: in its namespace, owned by its DaemonSet, under its
    ServiceAccount, and no job's (a job's pod in that namespace, whatever its template says, is never one)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels = meta.get("labels") or {}
    owned = any(
        isinstance(ref, dict)
        and ref.get("kind") == "DaemonSet"
        and ref.get("name") == checker.name
        and ref.get("controller")
        for ref in meta.get("ownerReferences") or ()
    )
    return (
        meta.get("namespace") == checker.namespace
        and LABEL_JOB not in labels
        and labels.get(NAME_LABEL) == NAME_VALUE
        and spec.get("serviceAccountName") == checker.name
        and owned
    )


def trusted_checks(pods: Iterable[Obj], checker: NodeChecker) -> list[NodeCheck]:
    """The checker pods' latest checks, each on the node its pod is bound to; a pod not yet bound, with no
    check yet, or whose annotation is not a check (said in the log) gives none."""
    found = []
    for pod in pods:
        if not is_checker(pod, checker):
            continue
        meta = pod["metadata"]
        node = (pod.get("spec") or {}).get("nodeName")
        text = (meta.get("annotations") or {}).get(ANNOTATION)
        if not node or not text:
            continue
        try:
            raw = json.loads(text)
            if not isinstance(raw, dict):
                raise ValueError("not a JSON object")
            result = CheckResult.from_dict(raw)
        except ValueError as error:
            log.warning(
                "node checker %s: its annotation %s is not a check (%s)", meta["name"], ANNOTATION, error
            )
            continue
        found.append(NodeCheck(node=str(node), checker=str(meta["name"]), result=result))
    return found


def carry_out(kube: Kube, verdicts: Verdicts, checker: NodeChecker, now: float) -> Mapping[str, float]:
    """Isolate the nodes ``verdicts`` names (``isolation.isolate``: the Node's annotation names the checker
    pod), and say on each node refused why; returns the checks acted on (node -> the check's time). An
    isolation the API server refuses is logged and not acted on: the next look tries again."""
    acted = dict(verdicts.settled)
    for verdict in verdicts.isolate:
        by = f"node checker {checker.namespace}/{verdict.checker}: {verdict.reason}"
        key = f"node-checker/isolate/{verdict.node}/{verdict.at:.3f}"
        try:
            isolation.isolate(kube, verdict.node, by, verdict.reason, now, key)
        except ApiError as error:
            log.warning("node %s could not be isolated: the API server refused (%s)", verdict.node, error)
            continue
        log.warning("%s", verdict.reason)
        acted[verdict.node] = verdict.at
    for verdict in verdicts.refused:
        key = f"node-checker/refused/{verdict.node}/{verdict.at:.3f}"
        try:
            isolation.node_event(kube, verdict.node, verdict.reason, now, key, reason="NodeNotIsolated")
        except ApiError as error:
            log.warning("cannot say why node %s was not isolated: %s", verdict.node, error)
        log.warning("%s", verdict.reason)
        acted[verdict.node] = verdict.at
    return acted


def look(
    kube: Kube,
    pods: Iterable[Obj],
    checker: NodeChecker,
    nodes: tuple[int, frozenset[str]],
    acted: Mapping[str, float],
    now: float,
) -> Mapping[str, float]:
    """One look of the operator's leader: the checker pods' checks decided (``policy.nodechecks.decide``, over
    ``nodes``: the cluster's count and those isolated now) and carried out; the checks acted on, ``acted``
    updated."""
    count, isolated = nodes
    verdicts = decide(
        trusted_checks(pods, checker),
        cluster_nodes=count,
        isolated=isolated,
        share=checker.max_isolated_share,
        acted=acted,
    )
    return {**acted, **carry_out(kube, verdicts, checker, now)}


def mode_words(mode: IsolationMode, checker: NodeChecker) -> str:
    """The cluster's isolation mode, as the operator's first log lines say it."""
    if mode is IsolationMode.OFF:
        return "isolation off (--no-isolation): pods of failed checks are issued again elsewhere, no node tainted"
    if mode is IsolationMode.AGENTS:
        return (
            "isolation by the jobs' checks (--isolation-mode agents): a job's failed check isolates the node its "
            "pod was bound to (the API server's word), within the check's bounds"
        )
    return (
        "isolation by the node checker alone (--isolation-mode node-checker): the checks of the pods of "
        f"DaemonSet {checker.namespace}/{checker.name} isolate the node each runs on (the API server's word), at "
        f"most {checker.max_isolated_share:.0%} of the nodes; a job's own failed checks issue its pods again "
        "elsewhere and isolate nothing"
    )
