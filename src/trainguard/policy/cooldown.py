"""An isolated node's cool-down (off by default; the operator's ``--isolation-cooldown``): after it, the node
is released **on probation**: pods may be placed there again, and the next pod's pre-check there is its re-check.
A node isolated again is one more strike, and waits twice as long each time (``cooldown_of``): a node that
keeps failing comes back ever more rarely, and an administrator's release (``trainguard node release``) clears
its strikes. Pure: the nodes' records in, the nodes due out; the backends read and carry them out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: No cool-down is ever longer than this (a node that failed eight times waits a week).
LONGEST = 7 * 86400.0


@dataclass(frozen=True)
class IsolatedNode:
    """An isolated node as its backend records it: since when (the backend's clock) and its strikes (the
    isolations since an administrator last released it, this one included)."""

    name: str
    since: float
    strikes: int = 1


def cooldown_of(strikes: int, base: float) -> float:
    """How long a node with ``strikes`` stays isolated: ``base``, doubled for each strike past the first."""
    return min(base * 2.0 ** max(strikes - 1, 0), LONGEST)


def due(nodes: Iterable[IsolatedNode], base: float, now: float) -> list[str]:
    """The nodes whose cool-down is over at ``now``, by name; none where the cool-down is off (``base`` 0)."""
    if base <= 0:
        return []
    return sorted(node.name for node in nodes if node.since + cooldown_of(node.strikes, base) <= now)


def next_due(nodes: Iterable[IsolatedNode], base: float) -> float | None:
    """When the next node's cool-down ends; None where none will (off, or no node isolated)."""
    if base <= 0:
        return None
    return min((node.since + cooldown_of(node.strikes, base) for node in nodes), default=None)
