"""Trying a job again after its reconcile failed, the same on every driver (the operator, the local runtime,
the simulator).

A reconcile that raises is tried again after a delay of the job's own that doubles with each failure in a row
(``BACKOFF_BASE`` seconds, then twice that, up to ``BACKOFF_MAX``), as client-go's rate-limited queue does,
and starts from the base again once it succeeds: one broken job is retried less and less often, and never
holds back the others. Each step is one log line (``Retry.log``), with the traceback the first time only.
(A status write that meets a newer stored status is no failure: ``trainguard.controller.loop`` says what
then.)
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Generic, NamedTuple, TypeVar

K = TypeVar("K", bound=Hashable)

#: The first retry of a failed reconcile, in seconds; each failure in a row doubles it, up to ``BACKOFF_MAX``.
BACKOFF_BASE = 0.5
BACKOFF_MAX = 300.0
#: 2**30 times the base is far beyond the cap; stops the power from growing without bound.
_MAX_DOUBLINGS = 30


def retry_delay(failures: int) -> float:
    """Seconds to wait before trying again after ``failures`` failures in a row (1 or more)."""
    doublings = min(max(failures - 1, 0), _MAX_DOUBLINGS)
    return float(min(BACKOFF_BASE * 2**doublings, BACKOFF_MAX))


class Retry(NamedTuple):
    """One step of a key's backoff: its failures in a row, and the delay before it is tried again."""

    failures: int
    delay: float

    @property
    def first(self) -> bool:
        """The first failure in a row: the one whose log line carries the traceback."""
        return self.failures == 1

    def log(self, logger: logging.Logger, what: str, error: BaseException) -> None:
        """Say this step in one line: at ERROR with the traceback the first time, at WARNING after."""
        if self.first:
            logger.error(self.line(what, error), exc_info=error)
        else:
            logger.warning(self.line(what, error))

    def line(self, what: str, error: BaseException) -> str:
        """The log line of this step: ``what`` failed (the error's first line after the first time, whose
        traceback says it all), and when it is tried again."""
        if self.first:
            return f"{what} failed; trying again in {self.delay:.1f} s"
        first_line = next(iter(str(error).splitlines()), "")
        return (
            f"{what} failed again ({self.failures} in a row): {type(error).__name__}: {first_line}; "
            f"trying again in {self.delay:.1f} s"
        )


class Retries(Generic[K]):
    """Each key's failures in a row: the driver's memory between its reconciles (as ``SettledSlots`` is), not
    safe across threads (the operator's work queue holds its lock around it)."""

    def __init__(self) -> None:
        self._failures: dict[K, int] = {}

    def failed(self, key: K) -> Retry:
        """``key`` failed once more: the step of its backoff it is at now."""
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        return Retry(failures, retry_delay(failures))

    def succeeded(self, key: K) -> None:
        """``key`` succeeded: its next failure backs off from the base again."""
        self._failures.pop(key, None)
