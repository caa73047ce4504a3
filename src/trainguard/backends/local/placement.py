"""Placing pods on virtual nodes: each pod takes one slot of one Ready node.

Pods spread out (the Ready node with the most free slots first, then by name), so that losing one node
costs as few pods as possible. A pod that lost its node avoids it when placed again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from trainguard.backends.local.records import NodeRecord, PodRecord


def free_slots(nodes: Iterable[NodeRecord], pods: Iterable[PodRecord]) -> dict[str, int]:
    """node -> slots not taken by a pod whose process is (or is about to be) running."""
    return free_of(nodes, Counter(pod.node for pod in pods if pod.holds_slot))


def free_of(nodes: Iterable[NodeRecord], used: Mapping[str, int]) -> dict[str, int]:
    """node -> slots free, from how many each node has in use (``Store.slots_in_use``)."""
    return {node.name: node.slots - used.get(node.name, 0) for node in nodes}


def choose_node(
    nodes: Sequence[NodeRecord], pods: Iterable[PodRecord], avoid: Iterable[str] = ()
) -> str | None:
    """The node for a new pod, or None when no Ready node has a free slot (the pod waits)."""
    return pick(nodes, free_slots(nodes, pods), avoid)


def pick(nodes: Sequence[NodeRecord], free: Mapping[str, int], avoid: Iterable[str] = ()) -> str | None:
    """``choose_node`` from the nodes' free slots (node -> free slots)."""
    avoided = set(avoid)
    candidates = [
        n for n in nodes if n.ready and not n.isolated and free.get(n.name, 0) > 0 and n.name not in avoided
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda node: (-free[node.name], _name_order(node.name))).name


def room(nodes: Iterable[NodeRecord], free: Mapping[str, int]) -> int:
    """Free slots on Ready nodes that are not isolated."""
    return sum(max(free.get(node.name, 0), 0) for node in nodes if node.ready and not node.isolated)


def _name_order(name: str) -> tuple[int, str]:
    """node-2 before node-10."""
    stem, _, number = name.rpartition("-")
    return (int(number), stem) if number.isdigit() else (1 << 30, name)
