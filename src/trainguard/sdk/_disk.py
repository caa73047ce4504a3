"""The disk tier of ``Snapshots`` (the checkpointer's directory), a part of the class (mixed into it):

- every ``persist_every``-th snapshot is written there from the shared memory by a thread of its own
  (``_persist``: no second copy in the step), skipped while the last write is still in progress;
- a snapshot that does not fit in memory (less than ``HEADROOM`` of what is free would be left, or its pages
  could not be reserved) is saved there instead, with one warning (``_refuse``), and so are the later steps
  (``_to_disk``): every ``persist_every``-th, or every ``FALLBACK_DISK_EVERY``-th when it is 0.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from trainguard.sdk import _shm
from trainguard.sdk._snapplan import DISK

log = logging.getLogger("trainguard.snapshots")

#: What ``save`` returns for a step it did not snapshot (between two snapshots of a GPU state, say, or
#: between two writes to disk once memory was refused).
SKIPPED = "skipped"
#: The whole of a snapshot is refused when less than this share of what is free would be left.
HEADROOM = 1.1
#: Once memory is refused, the steps go to disk every ``persist_every`` steps, or every this many when
#: ``persist_every`` is 0.
FALLBACK_DISK_EVERY = 100


class DiskTier:
    """The disk of ``Snapshots`` (see the module). What it uses of ``Snapshots``, set by its ``__init__``:"""

    directory: Path
    checkpointer: Any
    persist_every: int
    _in_memory: bool  # False once a snapshot did not fit: saves go to disk
    _persisting: threading.Thread | None  # the write to disk of a snapshot in memory

    def _persist(self, slot: _shm.Slot) -> None:
        previous = self._persisting
        if previous is not None and previous.is_alive():
            return  # the disk is behind: this one is skipped, memory still holds it
        self._persisting = threading.Thread(
            target=self._persist_slot, args=(slot,), name="trainguard-persist", daemon=False
        )
        self._persisting.start()

    def _persist_slot(self, slot: _shm.Slot) -> None:
        try:
            state = _shm.read_into_private(slot) if self.checkpointer.is_writer() else None
            if state is not None:
                self.checkpointer.save(state, slot.step)
        except FileNotFoundError:
            pass  # written over already: a newer one is persisted next time
        except Exception:
            log.exception("persisting the snapshot of step %d to disk failed", slot.step)

    def _refuse(self, state: Any, step: int, size: int, free: int | None = None, twice: bool = False) -> str:
        """A snapshot that does not fit (``twice``: two of it, beside the newest, do not): this one and every
        later one go to disk (one warning). ``free``: the room counted (else what is free now)."""
        self._in_memory = False
        log.warning(
            "a snapshot of %d MB does not fit%s in %s (%d MB free, counting the memory limit): saving to disk "
            "instead (%s)",
            size >> 20,
            " twice" if twice else "",
            self.directory,
            (_shm.bytes_free(self.directory) if free is None else free) >> 20,
            self.checkpointer.directory,
        )
        return self._to_disk(state, step, first=True)

    def _to_disk(self, state: Any, step: int, first: bool = False, last: bool = False) -> str:
        """A step once memory is refused: to disk if it is the refused one (``first``), a stopping worker's
        ``last``, or a ``persist_every``-th (``FALLBACK_DISK_EVERY``-th) step, else skipped. Skipped too while
        the last write is still in progress: a write takes many steps' time, and waiting for it would make
        every step that long (the last one waits: the worker stops after it)."""
        every = self.persist_every or FALLBACK_DISK_EVERY
        if not (first or last or step % every == 0) or (self.checkpointer.writing and not last):
            return SKIPPED
        self.checkpointer.save_async(state, step)
        return DISK
