"""A writer's training state kept in place, in a file of shared memory (``Snapshots(in_place=True)``)."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path
from typing import Any

from trainguard.sdk._layout import ALIGN, address_of, aligned
from trainguard.sdk._shm import NoRoom, Slot, reserve


class StateRegion:
    """A writer's training state kept in place: the tensors an optimizer changes (its parameters and state)
    are kept in a data file of shared memory, so that a snapshot copies only the rest (``Snapshots(in_place=True)``).

    Its directory holds one slot: ``slot-G.data`` (G, the generation: a new file each time the set of tensors
    kept changes), the kept storages first and a tail for the rest of a state, and ``slot-G.meta`` while the
    data is the state of the meta's step. ``dirty()`` removes the meta before the data changes (an optimizer's
    step pre-hook), ``commit`` puts one in place once ``Snapshots.save`` has copied the rest: a process killed
    in between leaves no snapshot here, never a torn one."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Files of an earlier process of this writer are its last snapshot (restore reads it): never reused.
        older = [int(p.name[len("slot-") : -len(".data")]) for p in directory.glob("slot-*.data")]
        self._generation = max(older, default=0)
        self._region: mmap.mmap | None = None
        self._fd = -1
        self.base = 0
        self.size = 0
        #: Bytes of the kept storages at the start of the data; the tail after them takes the rest.
        self.kept_end = 0
        self._committed = False
        self._superseded = bool(older)

    @property
    def data_path(self) -> Path:
        return self.directory / f"slot-{self._generation}.data"

    def offset_of(self, address: int) -> int | None:
        """The offset of a kept storage at ``address``; None for memory outside the kept part."""
        at = address - self.base
        return at if self._region is not None and 0 <= at < self.kept_end else None

    def holds(self, tensors: list[Any]) -> bool:
        return all(self.offset_of(tensor.untyped_storage().data_ptr()) is not None for tensor in tensors)

    def rehome(self, tensors: list[Any], tail: int) -> dict[int, int]:
        """Move the storages of ``tensors`` (CPU) into a new data file with ``tail`` bytes after them; every
        tensor keeps its identity (the optimizers' and modules' references stay good) and now views the file.
        Returns each moved storage's former address -> its offset (a state taken before the move names them)."""
        import torch

        self.dirty()
        moved: dict[int, int] = {}
        sizes: dict[int, int] = {}
        end = 0
        for tensor in tensors:
            storage = tensor.untyped_storage()
            address = storage.data_ptr()
            if address not in moved and storage.nbytes() > 0:
                moved[address], sizes[address] = end, storage.nbytes()
                end += aligned(storage.nbytes())
        size = max(end + aligned(tail), ALIGN)
        previous = self.data_path if self._region is not None else None
        self._generation += 1
        fd = os.open(self.data_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, size)
            reserve(fd, size, self.directory)
        except NoRoom:  # the tensors stay where they are; the new file goes
            os.close(fd)
            self.data_path.unlink(missing_ok=True)
            self._generation -= 1
            raise
        region = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        base = address_of(region)
        storages = {}
        for address, offset in moved.items():
            ctypes.memmove(base + offset, address, sizes[address])
            storages[address] = torch.frombuffer(
                region, dtype=torch.uint8, count=sizes[address], offset=offset
            ).untyped_storage()
        with torch.no_grad():
            for tensor in tensors:
                new = storages.get(tensor.untyped_storage().data_ptr())
                if new is not None:
                    view = torch.empty(0, dtype=tensor.dtype)
                    tensor.data = view.set_(new, tensor.storage_offset(), tensor.size(), tensor.stride())
        if self._fd >= 0:
            os.close(self._fd)  # the old mapping lives on while any tensor still views it; then it goes
        if previous is not None:
            previous.unlink(missing_ok=True)
        self._region, self._fd, self.base, self.size, self.kept_end = region, fd, base, size, end
        return moved

    def dirty(self) -> None:
        """The kept tensors are about to change: this region holds no snapshot until the next commit."""
        if self._committed:
            (self.directory / f"slot-{self._generation}.meta").unlink(missing_ok=True)
            self._committed = False

    def commit(self, body: bytes, meta: dict[str, Any]) -> Slot:
        temporary = self.directory / f".slot-{self._generation}.meta.tmp"
        temporary.write_bytes(body)
        os.replace(temporary, self.directory / f"slot-{self._generation}.meta")
        self._committed = True
        if self._superseded:  # an earlier process's last snapshot: this one is newer
            for path in self.directory.glob("slot-*"):
                if path.name not in (f"slot-{self._generation}.data", f"slot-{self._generation}.meta"):
                    path.unlink(missing_ok=True)
            self._superseded = False
        return Slot(self.directory, self._generation, meta)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
