"""The Kubernetes side of ``trainguard node`` and ``trainguard chaos hardware-fault|hardware-repair`` (with
``--kubeconfig``): the nodes a fault tolerance check isolated (``trainguard.backends.k8s.isolation``), and the
checks' injection aid (``trainguard.backends.k8s.faultinject``, read by pods only where the operator runs with
``--fault-injection``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from trainguard.cli.errors import CliError
from trainguard.cli.verbs._local import dump
from trainguard.pod.checks import ITEMS

T = TypeVar("T")
DEFAULT_ITEM = "gpu.ecc"


@contextmanager
def _kube(kubeconfig: str) -> Iterator[Any]:
    try:
        from trainguard.backends.k8s.client import Kube
    except ImportError as error:
        raise CliError(
            f"--kubeconfig needs the Kubernetes client ({error.name}): pip install 'trainguard[k8s]'"
        ) from None
    try:
        kube = Kube(kubeconfig)
    except Exception as error:
        raise CliError(
            f"--kubeconfig {kubeconfig}: cannot load the Kubernetes configuration: {error}"
        ) from None
    try:
        yield kube
    finally:
        kube.close()


def _asking(what: str, call: Callable[[], T]) -> T:
    """``call()``; the API server's refusal, or no answer, is one clear line (RBAC: which right is missing)."""
    from trainguard.backends.k8s.client import ApiError

    try:
        return call()
    except ApiError as error:
        if error.status == 0:
            raise CliError(f"{what}: cannot reach the API server ({error.message})") from None
        hint = {
            403: " (your credentials lack that right: ask for it, or use an account that has it)",
            404: " (see kubectl get nodes for the names)",
        }.get(error.status, "")
        raise CliError(f"{what}: the API server said {error.status}: {error.message}{hint}") from None
    except OSError as error:
        raise CliError(f"{what}: cannot reach the API server: {error}") from None


def node_list(kubeconfig: str, output: str | None) -> str:
    """The cluster's isolated nodes, with what isolated each (``trainguard.io/isolated-by``)."""
    from trainguard.backends.k8s import isolation

    with _kube(kubeconfig) as kube:
        found = _asking("listing the isolated nodes", lambda: isolation.isolated_nodes(kube))
    if output in ("json", "yaml"):
        items = [{"name": name, "isolated": True, "isolatedBy": by} for name, by in found]
        return dump({"apiVersion": "v1", "kind": "List", "items": items}, output)
    if not found:
        return "no node is isolated"
    width = max(len("NAME"), *(len(name) for name, _ in found))
    rows = [f"{'NAME'.ljust(width)}   ISOLATED BY"]
    rows += [f"{name.ljust(width)}   {by or '-'}" for name, by in found]
    return "\n".join(rows)


def node_release(kubeconfig: str, node: str) -> str:
    from trainguard.backends.k8s import isolation

    with _kube(kubeconfig) as kube:
        released = _asking(f"releasing node {node}", lambda: isolation.release(kube, node))
    if not released:
        return f"node {node} is not isolated: nothing to release"
    return (
        f"node {node} released: its taint {isolation.KEY} and label are gone; pods may be placed there again"
    )


def hardware_fault(kubeconfig: str, namespace: str, node: str, item: str | None) -> str:
    from trainguard.backends.k8s import faultinject
    from trainguard.backends.k8s.manifests import FAULT_INJECT_CONFIG_MAP

    chosen = item or DEFAULT_ITEM
    if chosen not in ITEMS:
        raise CliError(f"--item {chosen!r}: not a check item; one of {', '.join(ITEMS)}")
    with _kube(kubeconfig) as kube:
        _asking(
            f"injecting {chosen} on node {node}", lambda: faultinject.inject(kube, namespace, node, (chosen,))
        )
    return (
        f"the checks of namespace {namespace}'s pods on node {node} now read {chosen} as faulty (ConfigMap "
        f"{FAULT_INJECT_CONFIG_MAP}; a test aid: pods see it only where the operator runs with "
        "--fault-injection, running ones within about a minute)"
    )


def hardware_repair(kubeconfig: str, namespace: str, node: str) -> str:
    from trainguard.backends.k8s import faultinject

    with _kube(kubeconfig) as kube:
        repaired = _asking(f"repairing node {node}", lambda: faultinject.repair(kube, namespace, node))
    if not repaired:
        return f"nothing was injected on node {node} in namespace {namespace}"
    return f"node {node}: nothing injected any more in namespace {namespace}"
