"""The smallest driver of the reconcile loop: observe, reconcile, apply (the backends add waiting and
storage around it)."""

from __future__ import annotations

from trainguard.api import TrainingJob
from trainguard.controller.backend import Backend
from trainguard.controller.reconcile import ReconcileResult, reconcile
from trainguard.controller.settled import SettledSlots
from trainguard.controller.status import JobStatus


def step(
    backend: Backend,
    job: TrainingJob,
    status: JobStatus,
    now: float,
    settled: SettledSlots | None = None,
) -> ReconcileResult:
    """One round: what the backend shows now, what to do about it, and doing it (status written last)."""
    result = reconcile(job, status, backend.observe(job), now, settled)
    backend.apply(job, result.actions)
    return result
