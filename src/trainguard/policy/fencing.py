"""Fencing: one setting, the operator's wait before replacing a pod it cannot see end, and the agent's bound.

When a node goes NotReady the operator removes its pods at once and relaunches them elsewhere; the node's
kubelet, cut off but alive, may still run the old containers. So that two incarnations of one rank never train
at once, each pod's agent renews a lease with the operator and ends its command's whole tree by itself when it
cannot confirm, for ``agent_bound`` seconds, that it is still its slot's current incarnation; and the operator
holds the replacement of a pod whose end no kubelet confirms for ``seconds`` from its decision. ``seconds`` is
the one setting (the operator's ``--fence-seconds``, the chart's ``fencing.seconds``); the agent's bound is
derived from it here, and only here:

    agent_bound = seconds - margin,  margin = max(MIN_MARGIN, MARGIN_SHARE * seconds)

The margin covers what lies between the two clocks: how late the operator replica that answered a renewal saw
the node NotReady compared with the leader that decided (their caches' lag), the agent's poll of its watchers,
and the SIGKILL of the tree. Only intervals are compared, each on one machine's monotonic clock; no two
machines' clocks are.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The default wait: generous, so that an operator restart or a leader change (a minute or so without
#: answers) never ends a healthy job's workers; the agent's bound is then 90 s.
DEFAULT_SECONDS = 120.0
#: Below this the agent's bound would leave no room for one missed renewal on a loaded cluster.
MIN_SECONDS = 20.0
MIN_MARGIN = 10.0
MARGIN_SHARE = 0.25


@dataclass(frozen=True)
class Fencing:
    """The fencing of a backend whose lost pods may run on unseen (the operator's); None where none may."""

    #: How long the replacement of a pod on a node that is not Ready waits after the decision.
    seconds: float = DEFAULT_SECONDS

    def __post_init__(self) -> None:
        if not self.seconds >= MIN_SECONDS:  # also refuses NaN
            raise ValueError(
                f"fencing: {self.seconds:g} s is too short; give at least {MIN_SECONDS:g} s "
                f"(default {DEFAULT_SECONDS:g}), or 0 to turn fencing off"
            )

    @property
    def margin(self) -> float:
        return max(MIN_MARGIN, MARGIN_SHARE * self.seconds)

    @property
    def agent_bound(self) -> float:
        """How long an agent's workers run on without a confirmed renewal (``--fence-after``)."""
        return self.seconds - self.margin


def fencing_of(seconds: float) -> Fencing | None:
    """The fencing that the setting gives: 0 turns it off; anything else is checked (``ValueError``)."""
    return None if seconds == 0 else Fencing(seconds)
