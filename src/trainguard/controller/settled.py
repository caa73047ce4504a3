"""The caller's memory between reconciles: its settled slots (``faults.py`` says what a settled slot is and why
skipping it is safe), and the cache of its policy state's codec."""

from __future__ import annotations

from trainguard.controller.backend import ObservedPod
from trainguard.controller.status import PodStatus
from trainguard.policy.codec import StateCodec


class SettledSlots:
    """What one controller remembers between its reconciles about settled slots: job key -> slot name -> the
    slot and the pod it was found settled with. The caller of ``reconcile`` owns it (the local control
    plane, an operator, the simulator); without one, no slot is skipped."""

    def __init__(self, max_jobs: int = 64) -> None:
        #: Jobs remembered at most (those reconciled lately); past it, the table starts again.
        self.max_jobs = max_jobs
        self._jobs: dict[str, dict[str, tuple[PodStatus, ObservedPod]]] = {}
        #: Job key -> what reads and writes its ``JobStatus.policy_state`` in this controller's reconciles,
        #: remembering the entries of its latest read and write (so an unchanged pod's counters are not parsed or
        #: written again). Owned here, by one controller, rather than shared by every job of the process.
        self._codecs: dict[str, StateCodec] = {}

    def of(self, job: str) -> dict[str, tuple[PodStatus, ObservedPod]]:
        if job not in self._jobs and len(self._jobs) >= self.max_jobs:
            self._jobs.clear()
        return self._jobs.setdefault(job, {})

    def codec_of(self, job: str) -> StateCodec:
        if job not in self._codecs and len(self._codecs) >= self.max_jobs:
            self._codecs.clear()
        return self._codecs.setdefault(job, StateCodec())

    def clear(self) -> None:
        self._jobs.clear()
        self._codecs.clear()
