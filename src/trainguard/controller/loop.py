"""The smallest driver of the reconcile loop: observe, reconcile, apply (the backends add waiting and
storage around it), and the rule every driver follows after a conflicting status write.

A status write that meets a newer stored status (``Applied.conflict``) stops the batch: the result's status
was not stored, and what was decided from the status read is not carried out. The driver does not go on from
its ``status``: it reads the stored status again and decides again at once (``StepResult.again_at``). A
reconcile that raises is tried again after the job's backoff (``trainguard.controller.retries``).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.api import TrainingJob
from trainguard.controller.backend import Applied, Backend
from trainguard.controller.reconcile import ReconcileResult, reconcile
from trainguard.controller.settled import SettledSlots
from trainguard.controller.status import JobStatus

#: After a conflict, decide again this soon: at once, leaving a watch the moment to bring the newer version.
AFTER_CONFLICT_SECONDS = 0.05


@dataclass(frozen=True)
class StepResult(ReconcileResult):
    """What the controller decided, and what the backend reported of carrying it out."""

    applied: Applied

    @classmethod
    def of(cls, result: ReconcileResult, applied: Applied) -> StepResult:
        return cls(status=result.status, actions=result.actions, wake_at=result.wake_at, applied=applied)

    def again_at(self, now: float) -> float | None:
        """When to decide again at the latest: at once after a conflict (from the stored status, read again),
        else by ``wake_at`` (None: when something changes)."""
        return now + AFTER_CONFLICT_SECONDS if self.applied.conflict else self.wake_at


def step(
    backend: Backend,
    job: TrainingJob,
    status: JobStatus,
    now: float,
    settled: SettledSlots | None = None,
) -> StepResult:
    """One round: what the backend shows now, what to do about it, and doing it (status written last)."""
    result = reconcile(job, status, backend.observe(job), now, settled)
    return StepResult.of(result, backend.apply(job, result.actions))
