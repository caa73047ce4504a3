"""The GPU part of a memory snapshot: device-to-host copies at the pinned bandwidth, off the training step.

A snapshot's slot is a file of shared memory (``_shm``). Its mapping is registered with CUDA
(``cudaHostRegister``): page-locked, so a device-to-host copy into it runs at the pinned bandwidth (51.5 GB/s on
an H200 against 13.4-13.8 GB/s into pageable memory) and asynchronously, on a side stream of its own.

The copy is ordered after the training's work by an event recorded on the current stream when ``Snapshots.save``
is called (after the optimizer step, on whatever stream training uses), and training waits for the copy on the
GPU only (``wait_event``: the CPU goes on queueing work). Two ways, chosen per state:

- **Staged** (the state fits twice in the GPU's free memory, or ``gpu_staging=True``): the state is copied
  device-to-device into a buffer kept on the GPU (at the device's memory bandwidth: milliseconds), and
  training waits for that only; the buffer then drains to the slot over the next steps. A snapshot can be
  taken again once it has drained: every ``k`` steps, ``k`` the smallest interval whose copy hides behind
  ``k`` steps.
- **Direct** (no room for a second copy on the GPU): the copy reads the training's own tensors. The tensors that are not
  the optimizers' (buffers, which the next forward changes) go first and the next kernels wait for them; the
  optimizers' parameters and state go while the next forward and backward run, and the next optimizer step
  waits for them (``before_step``): it waits only for what it would overwrite.
"""

from __future__ import annotations

import ctypes
import logging
import math
from typing import Any, Dict, List, Optional, Set, Tuple  # noqa: UP035

log = logging.getLogger("trainguard.snapshots")

# typing's generics: these aliases are evaluated at import, and the SDK runs on Python 3.8 too.
_Copy = Tuple[int, Any, int]  # noqa: UP006 (offset in the slot's data, source tensor of the storage, bytes)

STAGED = "staged"
DIRECT = "direct"
#: A staged copy needs the state's bytes free on the GPU, with this share to spare.
STAGING_HEADROOM = 2.0
#: The share of a step a direct copy may cost: its interval is chosen so that the copy costs at most this.
DIRECT_BUDGET = 0.05
#: The interval leaves this margin over the measured copy (the step time varies).
INTERVAL_MARGIN = 1.2


class InFlight:
    """A snapshot's device-to-host copy under way: ``done`` is recorded on the side stream after the last
    byte; ``guard`` (direct copies) is what the next optimizer step must wait for."""

    def __init__(self, device: Any, ready: Any, done: Any, guard: Any) -> None:
        self.device = device
        self.ready = ready
        self.done = done
        self.guard = guard

    def wait(self) -> float:
        """Block until the copy is complete; returns the copy's time on the GPU in seconds."""
        self.done.synchronize()
        return float(self.ready.elapsed_time(self.done)) / 1000.0


class DeviceCopy:
    """Copies the CUDA storages of snapshots into registered slot mappings (one per ``Snapshots``)."""

    def __init__(self, staging: Optional[bool] = None) -> None:  # noqa: UP045
        #: None: staged when the state fits twice in the GPU's free memory; True/False: always/never.
        self.staging = staging
        self.mode: Optional[str] = None  # noqa: UP045
        self._registered: Dict[int, int] = {}  # noqa: UP006 (address -> bytes registered with CUDA)
        self._unregistrable: Dict[int, int] = {}  # noqa: UP006 (mappings CUDA refused to register)
        self._streams: Dict[Any, Any] = {}  # noqa: UP006
        self._stage: Dict[Any, Any] = {}  # noqa: UP006 (device -> flat uint8 buffer)

    # -- host memory ----------------------------------------------------------------------------------------

    def register(self, address: int, size: int) -> bool:
        """Page-lock ``size`` bytes at ``address`` for CUDA (once per mapping); False where CUDA refuses (the
        copy then runs at the pageable bandwidth, with one warning)."""

        if self._registered.get(address) == size:
            return True
        if self._unregistrable.get(address) == size:
            return False
        self.forget(address)
        error = _cuda().cudart().cudaHostRegister(address, size, 0)
        if int(error) != 0:
            self._unregistrable[address] = size
            log.warning(
                "CUDA could not page-lock a snapshot's shared memory (%d MB, error %s): its copies run at the "
                "pageable bandwidth",
                size >> 20,
                error,
            )
            return False
        self._registered[address] = size
        return True

    def forget(self, address: int) -> None:
        """The mapping at ``address`` is about to be unmapped: unregister it first."""

        self._unregistrable.pop(address, None)
        if self._registered.pop(address, None) is not None:
            _cuda().cudart().cudaHostUnregister(address)

    def close(self) -> None:
        for address in list(self._registered):
            self.forget(address)
        self._stage.clear()

    # -- copies ---------------------------------------------------------------------------------------------

    def start(self, copies: List[_Copy], destination: int, guarded: Set[int]) -> InFlight:  # noqa: UP006
        """Copy each CUDA storage of ``copies`` to ``destination + offset``, after the work queued so far on
        the current stream. ``guarded``: the storages (by address) that only an optimizer step changes."""
        import torch

        device = copies[0][1].device
        main = torch.cuda.current_stream(device)
        side = self._stream(device)
        ready = _cuda().Event(enable_timing=True)
        done = _cuda().Event(enable_timing=True)
        ready.record(main)
        side.wait_event(ready)
        total = sum(size for _, _, size in copies)
        mode = self._mode(device, total)
        stage = None
        if mode == STAGED:
            try:
                stage = self._staging(device, total)
            except torch.cuda.OutOfMemoryError:
                self.mode = DIRECT
                log.warning("no room on %s to stage a snapshot of %d MB: copying from the training's own tensors",
                            device, total >> 20)  # fmt: skip
        guard = None
        with torch.cuda.stream(side):
            if stage is not None:
                staged_copies = []
                at = 0
                for offset, tensor, size in copies:
                    source = _bytes_of(tensor)
                    stage[at : at + size].copy_(source, non_blocking=True)
                    tensor.record_stream(side)
                    staged_copies.append((offset, stage[at : at + size], size))
                    at += size
                staged = _cuda().Event()
                staged.record(side)
                main.wait_event(staged)  # training goes on once the state is on the stage
                for offset, source, size in staged_copies:
                    _host(destination + offset, size).copy_(source, non_blocking=True)
            else:
                first = [copy for copy in copies if copy[1].untyped_storage().data_ptr() not in guarded]
                later = [copy for copy in copies if copy[1].untyped_storage().data_ptr() in guarded]
                for offset, tensor, size in first:
                    _host(destination + offset, size).copy_(_bytes_of(tensor), non_blocking=True)
                    tensor.record_stream(side)
                rest = _cuda().Event()
                rest.record(side)
                main.wait_event(rest)  # buffers change in the next forward
                for offset, tensor, size in later:
                    _host(destination + offset, size).copy_(_bytes_of(tensor), non_blocking=True)
                    tensor.record_stream(side)
                guard = done
            done.record(side)
        return InFlight(device, ready, done, guard)

    def before_step(self, flight: Optional[InFlight]) -> None:  # noqa: UP045
        """An optimizer step is about to change its tensors: it waits, on the GPU, for their copy."""
        import torch

        if flight is not None and flight.guard is not None:
            torch.cuda.current_stream(flight.device).wait_event(flight.guard)

    def interval(self, copy_seconds: float, step_seconds: float) -> int:
        """The steps between snapshots: staged, the smallest ``k`` whose ``k`` steps hide the copy; direct,
        the smallest whose copy costs at most ``DIRECT_BUDGET`` of the steps (none of it can hide)."""
        if step_seconds <= 0:
            return 1
        if self.mode == DIRECT:
            return max(1, math.ceil(INTERVAL_MARGIN * copy_seconds / (DIRECT_BUDGET * step_seconds)))
        return max(1, math.ceil(INTERVAL_MARGIN * copy_seconds / step_seconds))

    def _mode(self, device: Any, total: int) -> str:

        if self.mode is None or (self.mode == STAGED and self._stage.get(device) is None):
            if self.staging is None:
                self.mode = STAGED if free_on(device) >= STAGING_HEADROOM * total else DIRECT
            else:
                self.mode = STAGED if self.staging else DIRECT
        return self.mode

    def _staging(self, device: Any, total: int) -> Any:
        import torch

        stage = self._stage.get(device)
        if stage is None or stage.numel() < total:
            self._stage.pop(device, None)
            stage = torch.empty(total, dtype=torch.uint8, device=device)
            self._stage[device] = stage
        return stage

    def _stream(self, device: Any) -> Any:

        stream = self._streams.get(device)
        if stream is None:
            stream = self._streams[device] = _cuda().Stream(device)
        return stream


def free_on(device: Any) -> int:
    """Bytes the device can still give this process: free on the device, and what PyTorch's allocator holds
    unused."""
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


def _bytes_of(tensor: Any) -> Any:
    """The whole storage of ``tensor`` as a flat uint8 tensor on its device."""
    import torch

    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())


def _host(address: int, size: int) -> Any:
    """A CPU uint8 tensor on ``size`` bytes of a mapping at ``address``."""
    import torch

    return torch.frombuffer((ctypes.c_char * size).from_address(address), dtype=torch.uint8)


def _cuda() -> Any:
    """``torch.cuda``, untyped (its stubs leave these calls untyped)."""
    import torch

    return torch.cuda
