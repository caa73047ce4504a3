"""Restart upon suspension (docs/policy.md §5, Hangs).

With hang handling on (the native ``hang:`` block with ``enabled: true``; ModelArts ``hang-retry``), a Hang
is decided here, before any rule: the process is stopped and started again in the same pod, not counted
toward any limit, at most ``maxConsecutive`` times in a row; progress resets the count
(``record_progress``). The next hang after that is a permanent failure of the pod with reason Hang.

With hang handling off, a Hang is an exceptional event like the others: a ``hang`` faultTolerantPolicy entry
decides it, else the role's restartPolicy (every policy that restarts on exceptional events replaces the pod).
"""

from __future__ import annotations

from trainguard.api.model import HangPolicy, TrainingJob
from trainguard.policy.types import PodCounters


def hang_handling(job: TrainingJob) -> HangPolicy | None:
    hang = job.spec.hang
    return hang if hang is not None and hang.enabled else None


def may_restart_in_place(hang: HangPolicy, counters: PodCounters) -> bool:
    return counters.consecutive_hangs < hang.max_consecutive
