"""The optimizers' tensors in ``Snapshots``, a part of the class (mixed into it): the parameters and state that
only an optimizer step changes (``_kept``). A copied snapshot copies them behind the step (the next optimizer
step waits for that copy); ``in_place=True`` moves them, CPU tensors, into a file of shared memory
(``_region.StateRegion``) where they train, so that a snapshot copies only the rest of the state, into the region's
tail (``_try_in_place``)."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainguard.sdk import _layout, _shm
from trainguard.sdk._disk import HEADROOM
from trainguard.sdk._region import StateRegion
from trainguard.sdk._snapplan import MEMORY

log = logging.getLogger("trainguard.snapshots")


def storage_of(tensor: Any) -> int:
    return int(tensor.untyped_storage().data_ptr())


class InPlace:
    """The optimizers' tensors (see the module). What it uses of ``Snapshots``, set by its ``__init__``:"""

    directory: Path
    checkpointer: Any
    persist_every: int
    _writer: _shm.SlotWriter
    _pool: ThreadPoolExecutor | None
    _optimizers: list[Any]
    _region: StateRegion | None  # with in_place=True
    _warned_in_place: bool
    _changed: threading.Condition
    _latest: _shm.Slot | None
    _device: Any  # the GPU part's (_gpusnapshots)
    _flight: Any

    if TYPE_CHECKING:

        def _finish_copy(self, *_: Any) -> None: ...
        def _meta(self, step: int, skeleton: Any) -> dict[str, Any]: ...
        def _refuse(
            self, state: Any, step: int, size: int, free: int | None = None, twice: bool = False
        ) -> str: ...
        def _prune(self, step: int, *also: Path) -> None: ...

    def _try_in_place(self, state: Any, step: int) -> str | None:
        """``save`` in the state region (what ``_save_in_place`` returns); None without ``in_place``, or when the
        optimizers' tensors are not all CPU tensors (one warning): they are copied instead."""
        kept = self._kept() if self._region is not None else []
        if kept and all(t.device.type == "cpu" and type(t).__name__ in ("Tensor", "Parameter") for t in kept):
            return self._save_in_place(state, step, kept)
        if kept and not self._warned_in_place:
            self._warned_in_place = True
            log.warning(
                "Snapshots(in_place=True) keeps CPU tensors in shared memory; this state's optimizer tensors are "
                "on %s: they are copied instead (on a side stream, into pinned shared memory)",
                next(t.device for t in kept if t.device.type != "cpu"),
            )
        return None

    def _save_in_place(self, state: Any, step: int, kept: list[Any]) -> str:
        """``in_place``: the optimizers' tensors are in the state region already (moved there by the first
        save, or again when they change); only the rest of ``state`` is copied, into the region's tail."""
        region = self._region
        assert region is not None
        plan = self._in_place_plan(state, {}) if region.holds(kept) else None
        if plan is None:  # the first save, the optimizers' tensors changed, or the rest outgrew the tail
            storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in kept}
            need = sum(_layout.aligned(size) for size in storages.values())
            rest = _layout.layout(state, lambda address: 0 if address in storages else None).size
            tail = rest + rest // 4 + (1 << 20)  # room for the rest to grow a little without another move
            if (need + tail) * HEADROOM > _shm.bytes_free(self.directory) + region.size:
                return self._refuse(state, step, need + tail)
            plan = self._in_place_plan(state, region.rehome(kept, tail))
            assert plan is not None
        region.dirty()  # a second save of the same step (SIGTERM's) writes the tail again
        meta = self._meta(step, plan.skeleton)
        _layout.copy_into(region.base, plan.copies, self._pool)
        body = _shm.meta_body(meta, region.size)
        slot = region.commit(body, _shm.load_meta(body))
        with self._changed:
            self._latest = slot
            self._changed.notify_all()
        # The region changes with the next optimizer step: the disk gets a copy taken now, written by a thread
        # (skipped while the last one is still being written, as with copies: memory holds this step).
        if self.persist_every and step % self.persist_every == 0 and not self.checkpointer.writing:
            self.checkpointer.save_async(state, step)
        self._prune(step, region.directory)
        return MEMORY

    def _in_place_plan(self, state: Any, moved: dict[int, int]) -> _layout.Layout | None:
        """Where ``state`` goes in the state region (None when its rest does not fit the tail): the kept
        storages where they are (``moved``: where those of a state taken before a move went), the rest copied
        into the tail."""
        region = self._region
        assert region is not None

        def placed(address: int) -> int | None:
            offset = region.offset_of(address)
            return moved.get(address) if offset is None else offset

        plan = _layout.layout(state, placed, region.kept_end)
        return plan if plan.size <= region.size else None

    def _before_step(self, *_: Any) -> None:
        """An optimizer's step pre-hook: the tensors it changes must be copied first (``_finish_copy``; for
        GPU tensors the step waits on the GPU), and the state region holds no snapshot while they change."""
        self._finish_copy()
        if self._device is not None:
            self._device.before_step(self._flight)
        if self._region is not None:
            self._region.dirty()

    def _kept(self) -> list[Any]:
        """The tensors an optimizer's step changes: its parameters and its state's tensors."""
        import torch

        found: dict[int, Any] = {}
        for optimizer in self._optimizers:
            for group in optimizer.param_groups:
                found.update((id(param), param) for param in group["params"])
            for state in optimizer.state.values():
                found.update((id(v), v) for v in state.values() if isinstance(v, torch.Tensor))
        return list(found.values())

    def _guarded(self) -> set[int]:
        """The storages that change only in an optimizer's step: the optimizers' parameters and state."""
        return {storage_of(tensor) for tensor in self._kept()}
