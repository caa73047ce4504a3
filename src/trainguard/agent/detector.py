"""Hang detection as pure logic: fed observations stamped with the agent's monotonic clock, it says whether the
current attempt hangs and whether it made progress. No clock reads, no I/O, so it is tested without sleeping.

Signals, in order of trust (``HangSignal``):

- ``heartbeat``: the SDK's per-rank heartbeat files. Progress time is the *oldest* of the ranks' latest
  heartbeats, so one stuck rank is a hang. Once a heartbeat arrived in an attempt, heartbeats alone decide:
  a silent job that heartbeats is never restarted, and a job that prints but stopped heartbeating is caught.
- ``log``: the time of the last byte the command wrote to stdout or stderr.
- ``cpu``: the CPU time of the whole process tree; the tree counts as idle while it averages under
  ``CPU_BUSY_FRACTION`` of one core since it was last busy (a blocked collective uses none). On a GPU the
  devices are read too (``gpu_activity``): a host thread waiting in a CUDA synchronize spins, so a tree whose
  devices hold a kernel while their SMs idle (a collective's kernel polling for a peer) is *waiting*, and the
  CPU it burns is not work; a device that computes is work, whatever the CPU does.
- ``io``: the bytes the process tree read and wrote (``/proc/<pid>/io``'s ``rchar`` and ``wchar``: every
  read and write call, files, pipes and sockets alike; ``read_bytes``/``write_bytes`` count only what reached
  the block device, so a job reading from the page cache or the network would look quiet). Any change of the
  total is progress; an unchanged total is quiet (ModelArts' first rule: the process's I/O unchanged).

Before any heartbeat, the enabled ones of ``log``, ``cpu`` and ``io`` decide together: the attempt hangs when *all* of
them have been quiet for the timeout (a silent but computing job is not a hang). With ``heartbeat`` as the
only signal, the attempt's start counts as its first heartbeat, so a job that never heartbeats is a hang.

Progress that resets the count of consecutive hang restarts (``HangStreak``) must be more than a restarted job
replaying what it did before it hung: a heartbeat step above the highest step seen before the last hang, or,
for jobs that report no steps, activity of the deciding signal later than one timeout after the restart.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainguard.agent.gpu import GpuSample
from trainguard.pod.hangsignal import HangSignal

#: The tree is busy when it used at least this share of one core since it was last busy...
CPU_BUSY_FRACTION = 0.01
#: ...and at least this much CPU time (the kernel counts in 10 ms ticks).
CPU_MIN_SECONDS = 0.05


#: A device computes while at least this share of its SMs is busy (GPM, percent): training keeps nearly all
#: of them busy (96.9 measured on an H200), a collective's kernel that polls for its peer keeps one (0.76).
GPU_SM_BUSY = 5.0
#: A device holds a kernel while NVML's utilization (the share of time any kernel ran) is at least this.
GPU_RESIDENT = 50
#: Without GPM: a device with a kernel computes unless it draws no more than this above (over its limit) the
#: least it drew with no kernel at all (an H200: 0.96 computing; 0.171 idle, 0.172 while a kernel polled).
#: Never seen idle, a device with a kernel counts as computing, as before.
GPU_POWER_MARGIN = 0.05


class GpuActivity(enum.Enum):
    COMPUTING = "computing"
    #: A kernel resident, the SMs idle: a collective waiting.
    WAITING = "waiting"
    IDLE = "idle"


def gpu_activity(samples: Sequence[GpuSample], power_floor: float | None) -> GpuActivity | None:
    """What the devices do: computing if any computes, waiting if any holds a kernel that does not, else idle;
    None when no device says (no GPU, no NVML). ``power_floor``: the least power fraction seen with no kernel
    resident (None: never seen idle)."""
    found: list[GpuActivity] = []
    for sample in samples:
        if sample.utilization is None:
            continue
        resident = sample.utilization >= GPU_RESIDENT
        if sample.sm_activity is not None:
            computing = sample.sm_activity >= GPU_SM_BUSY
        elif sample.power_fraction is not None and power_floor is not None:
            computing = resident and sample.power_fraction > power_floor + GPU_POWER_MARGIN
        else:
            computing = resident  # nothing finer: a resident kernel counts as work, as before
        found.append(
            GpuActivity.COMPUTING if computing else GpuActivity.WAITING if resident else GpuActivity.IDLE
        )
    if not found:
        return None
    for activity in (GpuActivity.COMPUTING, GpuActivity.WAITING):
        if activity in found:
            return activity
    return GpuActivity.IDLE


@dataclass(frozen=True)
class HeartbeatSample:
    """One rank's latest heartbeat as read from its file; a changed sample is a new heartbeat."""

    step: int | None
    written_at: float
    pid: int


@dataclass(frozen=True)
class Observation:
    """What the agent saw at ``now`` (its monotonic clock).

    ``heartbeats`` holds the ranks whose writer is still alive; ``output_at`` is when the last output byte
    of this attempt arrived (None: none yet); ``cpu_seconds`` is the tree's CPU time, None when not sampled;
    ``gpus`` what the devices showed at the same time, None where there are none or NVML is not here.
    """

    now: float
    heartbeats: Mapping[int, HeartbeatSample]
    output_at: float | None = None
    cpu_seconds: float | None = None
    gpus: Sequence[GpuSample] | None = None
    #: The tree's read and written bytes (rchar + wchar), None when not sampled.
    io_bytes: int | None = None


@dataclass(frozen=True)
class Hang:
    signal: HangSignal
    idle_seconds: float


@dataclass(frozen=True)
class Assessment:
    hang: Hang | None
    #: Progress that resets the hang-restart count (see the module docstring).
    progressed: bool
    #: The highest heartbeat step seen in this attempt.
    best_step: int | None


class HangDetector:
    """Watches one attempt. Create a new one for each (re)start of the command."""

    def __init__(
        self,
        *,
        timeout: float | None,
        signals: frozenset[HangSignal],
        started_at: float,
        baseline_step: int | None = None,
    ) -> None:
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self._timeout = timeout
        self._signals = signals
        self._started_at = started_at
        self._baseline_step = baseline_step
        self._ranks: dict[int, tuple[HeartbeatSample, float]] = {}
        self._heartbeat_seen = False
        self._steps_seen = False
        self._ranks_emptied_at: float | None = None
        self._best_step: int | None = None
        self._output_at = started_at
        self._cpu_busy_at = started_at
        self._cpu_mark: tuple[float, float] | None = None
        self._power_floor: float | None = None
        self._io_at = started_at
        self._io_mark: int | None = None

    def rebase(self, now: float) -> None:
        """No worker runs until ``now`` (torchrun is forming its next round): every signal's timeout starts
        again from ``now``, and the heartbeats of the workers before are forgotten."""
        self._started_at = max(self._started_at, now)
        self._output_at = max(self._output_at, now)
        self._cpu_busy_at = max(self._cpu_busy_at, now)
        self._cpu_mark = None
        self._io_at = max(self._io_at, now)
        self._io_mark = None
        self._ranks.clear()
        self._ranks_emptied_at = now

    @property
    def heartbeats_in_charge(self) -> bool:
        return HangSignal.HEARTBEAT in self._signals and self._heartbeat_seen

    def observe(self, observation: Observation) -> Assessment:
        now = observation.now
        before = {signal: self._progress_at(signal) for signal in HangSignal}
        self._note_heartbeats(now, observation.heartbeats)
        if observation.output_at is not None:
            self._output_at = max(self._output_at, observation.output_at)
        gpu = self._note_gpus(observation.gpus) if observation.gpus is not None else None
        if observation.cpu_seconds is not None:
            self._note_cpu(now, observation.cpu_seconds, gpu)
        if observation.io_bytes is not None:
            self._note_io(now, observation.io_bytes)
        deciding = self._deciding_signals()
        return Assessment(
            hang=self._hang(now, deciding),
            progressed=self._progressed(deciding, before),
            best_step=self._best_step,
        )

    def _note_heartbeats(self, now: float, heartbeats: Mapping[int, HeartbeatSample]) -> None:
        had_ranks = bool(self._ranks)
        for rank in [rank for rank in self._ranks if rank not in heartbeats]:
            del self._ranks[rank]
        for rank, sample in heartbeats.items():
            known = self._ranks.get(rank)
            if known is None or known[0] != sample:
                self._ranks[rank] = (sample, now)
                self._heartbeat_seen = True
                if sample.step is not None:
                    self._steps_seen = True
                    self._best_step = (
                        sample.step if self._best_step is None else max(self._best_step, sample.step)
                    )
        if had_ranks and not self._ranks:
            # Every writer ended (e.g. torchrun restarting its workers): wait a timeout for new ones.
            self._ranks_emptied_at = now

    def _note_gpus(self, samples: Sequence[GpuSample]) -> GpuActivity | None:
        powers = [
            s.power_fraction
            for s in samples
            if s.power_fraction is not None and s.utilization is not None and s.utilization < GPU_RESIDENT
        ]
        if powers:
            self._power_floor = min(powers + ([self._power_floor] if self._power_floor is not None else []))
        return gpu_activity(samples, self._power_floor)

    def _note_cpu(self, now: float, total: float, gpu: GpuActivity | None) -> None:
        if gpu is GpuActivity.COMPUTING:
            self._cpu_busy_at = now
            self._cpu_mark = (now, total)
            return
        if gpu is GpuActivity.WAITING and self._cpu_mark is not None:
            self._cpu_mark = (now, total)  # the CPU it used spun in a synchronize: not work
            return
        if self._cpu_mark is None or total < self._cpu_mark[1]:
            # First sample, or processes left the tree and took their CPU time with them.
            self._cpu_mark = (now, total)
            return
        marked_at, marked_total = self._cpu_mark
        window = now - marked_at if self._timeout is None else min(now - marked_at, self._timeout)
        if total - marked_total >= max(CPU_MIN_SECONDS, CPU_BUSY_FRACTION * window):
            self._cpu_busy_at = now
            self._cpu_mark = (now, total)

    def _note_io(self, now: float, total: int) -> None:
        # Any change is progress, a fall too (a process that did I/O left the tree: the tree changed).
        if self._io_mark is not None and total != self._io_mark:
            self._io_at = now
        self._io_mark = total

    def _deciding_signals(self) -> tuple[HangSignal, ...]:
        if self.heartbeats_in_charge:
            return (HangSignal.HEARTBEAT,)
        fallback = tuple(
            signal for signal in (HangSignal.LOG, HangSignal.CPU, HangSignal.IO) if signal in self._signals
        )
        return fallback or tuple(signal for signal in (HangSignal.HEARTBEAT,) if signal in self._signals)

    def _progress_at(self, signal: HangSignal) -> float:
        if signal is HangSignal.LOG:
            return self._output_at
        if signal is HangSignal.CPU:
            return self._cpu_busy_at
        if signal is HangSignal.IO:
            return self._io_at
        if self._ranks:
            return min(seen_at for _, seen_at in self._ranks.values())
        return self._ranks_emptied_at if self._ranks_emptied_at is not None else self._started_at

    def _hang(self, now: float, deciding: tuple[HangSignal, ...]) -> Hang | None:
        if self._timeout is None or not deciding:
            return None
        idle = {signal: now - self._progress_at(signal) for signal in deciding}
        if min(idle.values()) < self._timeout:
            return None
        # Report the signal that went quiet last: it is the one whose timeout completed the detection.
        last = min(deciding, key=lambda signal: idle[signal])
        return Hang(last, idle[last])

    def _progressed(self, deciding: tuple[HangSignal, ...], before: Mapping[HangSignal, float]) -> bool:
        if (self.heartbeats_in_charge and self._steps_seen) or (
            # A job that reported steps before it hung progresses only past them: a restarted command's start
            # (its imports' CPU, its first lines), however late on a busy machine, replays what it did.
            self._baseline_step is not None and HangSignal.HEARTBEAT in self._signals
        ):
            return self._best_step is not None and (
                self._baseline_step is None or self._best_step > self._baseline_step
            )
        if self._timeout is None:
            return False
        later_than = self._started_at + self._timeout
        return any(self._progress_at(signal) > max(before[signal], later_than) for signal in deciding)


class HangStreak:
    """Hang restarts in a row: at most ``max_consecutive``; progress starts the count again."""

    def __init__(self, max_consecutive: int) -> None:
        if max_consecutive < 0:
            raise ValueError(f"max_consecutive must be 0 or more, got {max_consecutive}")
        self.max_consecutive = max_consecutive
        self.count = 0
        #: The highest heartbeat step reached before the last hang; a restart must pass it to progress.
        self.watermark: int | None = None

    def progressed(self) -> None:
        self.count = 0

    def hang(self, best_step: int | None) -> bool:
        """Record a hang; True when another restart in place is allowed."""
        if best_step is not None:
            self.watermark = best_step if self.watermark is None else max(self.watermark, best_step)
        if self.count >= self.max_consecutive:
            return False
        self.count += 1
        return True
