"""Who keeps a copy of whose shard: each rank's buddy is the next rank (cyclically) on another node or pod, else
the next rank. One choice for both users of it: the snapshots' buddy (``trainguard.sdk._buddy``: a copy of each
snapshot in a peer node's shared memory) and live mode's sharded states (``trainguard.sdk._sharded``: a copy of
each applied step's shard in a peer's memory). Pure: the ranks' nodes in, ranks out."""

from __future__ import annotations

from collections.abc import Sequence


def buddy_of(rank: int, nodes: Sequence[str]) -> int | None:
    """The next rank (cyclically) on another node, else the next rank; None alone."""
    world = len(nodes)
    if world < 2:
        return None
    order = [(rank + step) % world for step in range(1, world)]
    elsewhere = [other for other in order if nodes[other] != nodes[rank]]
    return (elsewhere or order)[0]


def wards_of(rank: int, nodes: Sequence[str]) -> list[int]:
    """The ranks whose buddy ``rank`` is (none, one, or several where the nodes are uneven), in rank order."""
    return [other for other in range(len(nodes)) if buddy_of(other, nodes) == rank]


def no_buddy_elsewhere(nodes: Sequence[str]) -> str | None:
    """Why some shard's copy would be lost with its owner's node (words for a warning); None when every rank's
    buddy is on another node, which it is wherever there is another node (``buddy_of``)."""
    if len(nodes) < 2:
        return "a world of 1: no other member keeps a copy of its shard"
    if len(set(nodes)) == 1:
        return (
            f"every member is on {nodes[0]}: each shard's copy is kept by another process of it, which the loss "
            "of that pod or node takes with it"
        )
    return None
