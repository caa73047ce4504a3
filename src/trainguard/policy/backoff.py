"""Exponential backoff between restarts of the same pod (docs/policy.md §4, Limits and backoff).

The first restart of a streak is at once (as kubelet restarts a container the first time); the n-th restart in
a row after it waits ``initialSeconds * 2**(n-2)``, at most ``maxSeconds``. A pod that ran healthily for
``resetAfterSeconds`` before it failed starts a new streak. Evictions and hang restarts in place do not wait
and do not grow the streak.
"""

from __future__ import annotations

from trainguard.api.model import BackoffPolicy
from trainguard.policy.types import PodCounters

#: 2**40 seconds is far beyond any cap; stops the power from growing without bound.
_MAX_DOUBLINGS = 40


def backoff_delay(policy: BackoffPolicy, streak: int) -> float:
    """Seconds to wait before a restart that follows ``streak`` restarts in a row: none after none (a fault
    that is not a repeat is acted on at once), then ``initialSeconds`` doubling."""
    if streak <= 0:
        return 0.0
    doublings = min(streak - 1, _MAX_DOUBLINGS)
    return float(min(policy.initial_seconds * 2**doublings, policy.max_seconds))


def ran_healthy(policy: BackoffPolicy, counters: PodCounters, at: float) -> bool:
    """Whether the pod had been running for ``resetAfterSeconds`` when it failed at ``at``."""
    since = counters.running_since
    return since is not None and at - since >= policy.reset_after_seconds
