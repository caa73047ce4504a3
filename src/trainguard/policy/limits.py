"""Restart budgets (docs/policy.md §4, Limits and backoff, and §7, ModelArts-style job retries): restartLimit
per role over a sliding window, the job's backoffLimit, and the ModelArts job-retry budgets. Only counted
restarts spend them.

The window of ``restartTimeout`` seconds is half-open: a restart exactly ``restartTimeout`` seconds ago has
left it. A limit of N allows N counted restarts; the (N+1)-th fault finds it spent.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.api.model import ReplicaSpec, TrainingJob
from trainguard.policy.types import PolicyState
from trainguard.policy.words import seconds, times


@dataclass(frozen=True)
class Spent:
    """A budget that stops a restart: its name (for Decision.limit) and the words for the reason."""

    limit: str
    words: str
    #: The whole job fails (a job-level budget), rather than just the pod.
    fails_job: bool


def window_start(spec: ReplicaSpec, now: float) -> float | None:
    """Counted restarts at or before this time no longer count toward restartLimit.

    Without a window every counted restart counts for the job's whole life, so none may be dropped;
    without a limit none needs keeping, and only the newest is kept.
    """
    if spec.restart_limit is None:
        return now
    if spec.restart_timeout is None:
        return None
    return now - spec.restart_timeout


def counted_in_window(spec: ReplicaSpec, state: PolicyState, role: str, now: float) -> int:
    start = window_start(spec, now)
    return sum(1 for at in state.counted_restarts.get(role, ()) if start is None or at > start)


def describe_window(spec: ReplicaSpec) -> str:
    return (
        f"within {seconds(spec.restart_timeout)}" if spec.restart_timeout is not None else "in the job's life"
    )


def restart_limit_spent(spec: ReplicaSpec, state: PolicyState, role: str, now: float) -> Spent | None:
    limit = spec.restart_limit
    if limit is None:
        return None
    used = counted_in_window(spec, state, role, now)
    if used < limit:
        return None
    return Spent(
        "restartLimit",
        f"restartLimit {limit} of role {role} is spent ({times(used)} {describe_window(spec)})",
        fails_job=False,
    )


def backoff_limit_spent(job: TrainingJob, state: PolicyState) -> Spent | None:
    limit = job.spec.backoff_limit
    if limit is None or state.job_restarts < limit:
        return None
    return Spent(
        "backoffLimit",
        f"the job's backoffLimit {limit} is reached ({times(state.job_restarts)})",
        fails_job=True,
    )


def job_retry_spent(job: TrainingJob, state: PolicyState, streak_reset: bool) -> Spent | None:
    """The ModelArts budgets: job-retry-num in all, and at most N unconditional retries in a row."""
    retry = job.spec.job_retry
    if retry is None:
        return None
    if retry.retry_num is not None and state.job_retries >= retry.retry_num:
        return Spent(
            "jobRetryNum",
            f"job-retry-num {retry.retry_num} is spent ({times(state.job_retries, 'job retry')})",
            fails_job=True,
        )
    streak = 0 if streak_reset else state.unconditional_streak
    if retry.unconditional and streak >= retry.unconditional_max_consecutive:
        return Spent(
            "jobUnconditionalRetry",
            f"job-unconditional-retry allows {retry.unconditional_max_consecutive} retries in a row, "
            f"and {streak} came without healthy running between them",
            fails_job=True,
        )
    return None
