"""The snapshots of a GPU state, a part of ``Snapshots`` (mixed into it): how, and how often.

- **How**: the state's CPU part is copied at once, its GPU part on a side stream into the slot's pinned mapping
  (``_devicecopy.DeviceCopy``: staged or direct), and a thread commits the slot once the GPU has copied its
  last byte. The next snapshot waits for that commit; an optimizer step waits on the GPU for its own tensors.
- **How often**: every ``k`` steps, ``k`` the smallest interval whose copy hides behind it
  (``DeviceCopy.interval``), chosen once from the first snapshot's copy time and the steps' median time,
  ``DECIDE_AFTER`` steps after the first snapshot, and the same on every rank (the largest any rank chose).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from trainguard.sdk import _layout, _shm
from trainguard.sdk._dist import all_gather, distributed
from trainguard.sdk._snapplan import MEMORY

log = logging.getLogger("trainguard.snapshots")

#: A GPU state's snapshot interval is chosen at this many steps after the first snapshot.
DECIDE_AFTER = 3


class GpuSnapshots:
    """The GPU part of ``Snapshots`` (see the module). What it uses of ``Snapshots``, set by its ``__init__``:"""

    world_size: int
    _writer: _shm.SlotWriter
    _pool: ThreadPoolExecutor | None
    _copier: ThreadPoolExecutor  # the thread that completes and commits a snapshot

    if TYPE_CHECKING:

        def _commit(self, pending: _shm.Pending, body: bytes, step: int) -> None: ...

    def _init_gpu(self, every: int | None, staging: bool | None) -> None:
        """The state of this part (``Snapshots(every=..., gpu_staging=...)``), set by ``Snapshots.__init__``."""
        if every is not None and every < 1:
            raise ValueError(f"Snapshots(every={every}): must be 1 or more (None: chosen for a GPU state)")
        self._every = every
        self._staging = staging
        self._device: Any = None  # _devicecopy.DeviceCopy, made at the first snapshot of a GPU state
        self._flight: Any = None  # the GPU copy under way
        self._committing: Future[None] | None = None
        self._copy_seconds = 0.0
        self._on_device = False
        self._first_step: int | None = None
        self._interval: int | None = None
        self._last_call: float | None = None
        self._step_seconds: list[float] = []

    @property
    def every(self) -> int | None:
        """The steps between snapshots: as given (``every``), else 1 for a CPU state and, for a GPU state, the
        interval chosen a few steps after its first snapshot (None until then)."""
        if self._every is not None:
            return self._every
        if self._first_step is None:
            return None
        return self._interval if self._on_device else 1

    @property
    def copy_mode(self) -> str:
        """How a snapshot's GPU tensors are copied: ``staged`` or ``direct`` (``_devicecopy``); ``cpu`` for a
        CPU state."""
        return self._device.mode if self._device is not None and self._device.mode else "cpu"

    def _save_device(self, plan: _layout.Layout, body: bytes, step: int, guarded: set[int]) -> str:
        """A state with GPU tensors: its CPU part is copied now, its GPU part on a side stream into the slot's
        pinned mapping (``_devicecopy``); a thread commits the slot once the GPU has copied the last byte."""
        device = self._device_copy()
        on_gpu = [copy for copy in plan.copies if copy[1].device.type == "cuda" and copy[2] > 0]
        on_cpu = [copy for copy in plan.copies if copy[1].device.type != "cuda"]
        pending = self._writer.begin(plan.size)
        try:
            device.register(pending.address, pending.size)
            _layout.copy_into(pending.address, on_cpu, self._pool)
            flight = device.start(on_gpu, pending.address, guarded)
        except BaseException:
            self._writer.abandon(pending)
            raise
        self._flight = flight
        self._committing = self._copier.submit(self._complete_device, pending, flight, body, step)
        return MEMORY

    def _complete_device(self, pending: _shm.Pending, flight: Any, body: bytes, step: int) -> None:
        try:
            self._copy_seconds = flight.wait()
        except BaseException:
            self._writer.abandon(pending)
            raise
        self._commit(pending, body, step)

    def _device_copy(self) -> Any:
        if self._device is None:
            from trainguard.sdk._devicecopy import DeviceCopy

            self._device = DeviceCopy(self._staging)
            self._writer.unmapping = self._device.forget
        return self._device

    def _finish_device(self) -> None:
        """Wait for the GPU snapshot under way to be committed (not in an optimizer step: that waits on the
        GPU, for its own tensors only)."""
        committing, self._committing = self._committing, None
        if committing is not None:
            committing.result()
            self._flight = None

    def _due(self, step: int) -> bool:
        """Whether ``step`` is snapshotted: every step for a CPU state (unless ``every`` says otherwise); for a
        GPU state every ``k`` steps, ``k`` chosen once from the first snapshot's copy time and the step time
        (``_devicecopy.DeviceCopy.interval``), the same on every rank."""
        if self._every is not None:
            return step % self._every == 0
        if self._first_step is None:
            self._first_step = step
            self._last_call = time.perf_counter()
            return True
        if not self._on_device:
            return True
        if self._interval is None:  # the steps are timed only until the interval is chosen
            now = time.perf_counter()
            if self._last_call is not None:
                self._step_seconds.append(now - self._last_call)
            self._last_call = now
            if step < self._first_step + DECIDE_AFTER:
                return False
            self._interval = self._decide_interval()
        return step % self._interval == 0

    def _decide_interval(self) -> int:
        self._finish_device()
        intervals = sorted(self._step_seconds[1:] or self._step_seconds)
        step_seconds = intervals[len(intervals) // 2] if intervals else 0.0
        device = self._device_copy()
        mine = device.interval(self._copy_seconds, step_seconds)
        every = max(all_gather(mine)) if distributed() and self.world_size > 1 else mine
        log.warning(
            "snapshots of this GPU state every %d steps (%s copy of %.0f ms, step of %.1f ms); set "
            "Snapshots(every=...) to choose",
            every, device.mode, self._copy_seconds * 1000, step_seconds * 1000,
        )  # fmt: skip
        return int(every)
