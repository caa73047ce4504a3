"""The caller's memory of settled slots (``faults.py`` says what a settled slot is and why skipping it is safe)."""

from __future__ import annotations

from trainguard.controller.backend import ObservedPod
from trainguard.controller.status import PodStatus


class SettledSlots:
    """What one controller remembers between its reconciles about settled slots: job key -> slot name -> the
    slot and the pod it was found settled with. The caller of ``reconcile`` owns it (the local control
    plane, an operator, the simulator); without one, no slot is skipped."""

    def __init__(self, max_jobs: int = 64) -> None:
        #: Jobs remembered at most (those reconciled lately); past it, the table starts again.
        self.max_jobs = max_jobs
        self._jobs: dict[str, dict[str, tuple[PodStatus, ObservedPod]]] = {}

    def of(self, job: str) -> dict[str, tuple[PodStatus, ObservedPod]]:
        if job not in self._jobs and len(self._jobs) >= self.max_jobs:
            self._jobs.clear()
        return self._jobs.setdefault(job, {})

    def clear(self) -> None:
        self._jobs.clear()
