"""Hang detection: the SDK's heartbeats, the command's output, its tree's CPU time and I/O and the pod's GPUs
(``trainguard.agent.detector``), fed every poll; the progress the heartbeats show, reported at most once a
second."""

from __future__ import annotations

from collections.abc import Callable

from trainguard.agent import tree
from trainguard.agent.config import AgentConfig
from trainguard.agent.detector import Hang, HangDetector, HangStreak, Observation
from trainguard.agent.gpu import GpuSample, Nvml, NvmlUnavailable
from trainguard.agent.heartbeats import Heartbeat, HeartbeatReader
from trainguard.agent.report import Reporter
from trainguard.agent.watchers.base import Hung, Tick
from trainguard.pod import contract
from trainguard.pod.hangsignal import HangSignal

_CPU_SAMPLE_INTERVAL = 1.0
_PROGRESS_REPORT_INTERVAL = 1.0


class HangWatcher:
    def __init__(
        self,
        config: AgentConfig,
        streak: HangStreak,
        heartbeats: HeartbeatReader,
        output_at: Callable[[], float | None],
        reporter: Reporter,
        say: Callable[[str], None],
    ) -> None:
        self.config = config
        self.streak = streak
        self.heartbeats = heartbeats
        #: When the command last wrote to its stdout or stderr.
        self.output_at = output_at
        self.reporter = reporter
        self.say = say
        #: NVML, loaded on the first CPU sample; False where there is none (no GPU, no driver).
        self._nvml: Nvml | bool | None = None
        self._last_progress: tuple[float, object] | None = None
        #: Report-only: a suspected hang is reported and not yet cleared.
        self._suspected = False
        self.start(0.0)  # the agent's loop starts it again with each run of the command

    def start(self, now: float) -> None:
        config = self.config
        self.detector = HangDetector(
            timeout=config.hang_timeout,
            signals=config.signals,
            started_at=now,
            baseline_step=self.streak.watermark,
        )
        self._next_cpu = now
        self._last_progress = None

    def rebase(self, now: float) -> None:
        """Nothing can hang before ``now`` (no worker runs while torchrun forms a round)."""
        self.detector.rebase(now)

    def poll(self, tick: Tick) -> Hung | None:
        config, detector, now = self.config, self.detector, tick.now
        beats = self.heartbeats.read()
        cpu: float | None = None
        io: int | None = None
        gpus: tuple[GpuSample, ...] | None = None
        sampled = config.signals & {HangSignal.CPU, HangSignal.IO}
        if (
            config.hang_timeout is not None
            and sampled
            and not detector.heartbeats_in_charge
            and now >= self._next_cpu
        ):
            processes = tree.descendants()
            if HangSignal.CPU in sampled:
                cpu = tree.cpu_seconds(processes)
                gpus = self._sample_gpus()
            if HangSignal.IO in sampled:
                io = tree.io_bytes(processes)
            self._next_cpu = now + _CPU_SAMPLE_INTERVAL
        assessment = detector.observe(
            Observation(
                now=now,
                heartbeats={rank: beat.sample for rank, beat in beats.items()},
                output_at=self.output_at(),
                cpu_seconds=cpu,
                gpus=gpus,
                io_bytes=io,
            )
        )
        if assessment.progressed:
            self.streak.progressed()
        if beats and self.reporter.enabled:
            self._report_progress(tick, beats)
        if config.report_only:
            self._suspect(tick, assessment.hang)
            return None
        if assessment.hang is not None:
            return Hung(assessment.hang, assessment.best_step)
        return None

    def _suspect(self, tick: Tick, hang: Hang | None) -> None:
        """Report-only: the suspicion once when a hang starts, and its end once progress resumes."""
        if hang is not None and not self._suspected:
            self._suspected = True
            self.reporter.event(
                contract.REPORT_SUSPECTED_HANG,
                pid=tick.pid,
                attempt=tick.attempt,
                signal=hang.signal.value,
                idle_seconds=round(hang.idle_seconds, 3),
            )
            self.say(
                f"the job may be suspended: no progress ({hang.signal.value}) for {hang.idle_seconds:.1f} s; "
                "detection only, the command runs on"
            )
        elif hang is None and self._suspected:
            self._suspected = False
            self.reporter.event(contract.REPORT_SUSPICION_CLEARED, pid=tick.pid, attempt=tick.attempt)
            self.say("progress resumed: no longer suspended")

    def _sample_gpus(self) -> tuple[GpuSample, ...] | None:
        """What the pod's devices do (the detector tells a collective's wait from work by them); None where
        NVML is not here."""
        if self._nvml is None:
            try:
                self._nvml = Nvml.load()
            except NvmlUnavailable:
                self._nvml = False
        if not isinstance(self._nvml, Nvml):
            return None
        try:
            return self._nvml.sample_all() or None
        except NvmlUnavailable as error:
            self.say(f"reading the GPUs failed, the CPU alone decides from now on: {error}")
            self._nvml = False
            return None

    def _report_progress(self, tick: Tick, beats: dict[int, Heartbeat]) -> None:
        key = tuple(sorted((rank, beat.sample) for rank, beat in beats.items()))
        last = self._last_progress
        if last is not None and (last[1] == key or tick.now - last[0] < _PROGRESS_REPORT_INTERVAL):
            return
        first = beats[min(beats)]
        self.reporter.event(
            contract.REPORT_PROGRESS,
            pid=tick.pid,
            attempt=tick.attempt,
            step=first.sample.step,
            rank=first.rank,
            ranks=len(beats),
            metrics=first.metrics,
        )
        self._last_progress = (tick.now, key)
