"""Snapshots of a training state in shared memory, as files of a tmpfs directory (``/dev/shm`` by default).

A file in shared memory outlives the process that wrote it: a worker that torchrun restarts in the same pod
(or a pod relaunched on the same node) finds the state of its last step there, without a read from disk. The
directory is the node's: trainguard's runtime gives every pod of a node the same one and removes it when the
node is lost or the job ends.

One writer's snapshots are kept in a directory of their own (``own-<key>`` for a worker's own, ``buddy-<key>`` for
the copies a peer replicates here) as numbered **slots**, each two files: ``slot-N.data``, the bytes of every
tensor storage one after the other (64-byte aligned), and ``slot-N.meta``, a pickle of the state with its
tensors replaced by references into the data, with the step, the rank and the world. A slot is written in that
order and its meta is renamed into place last, so a slot with a meta is complete; its meta is removed before
its data is written over. Every meta has a generation of its own: a reader reads a slot only while it holds
the snapshot that was listed (``Slot.reading``), never a newer one written into it meanwhile. The writer takes
the slot that holds neither its newest complete snapshot nor a reader (``flock``: a replication or a persist
to disk reading it), so two slots suffice while readers keep up, and at most ``MAX_SLOTS`` are ever made.

The data files are kept mapped by the writer between steps: after the first snapshot, taking one is a
``memmove`` of the state into pages already there (no allocation, no page faults). Their pages are reserved
before they are mapped (``reserve``): a full tmpfs refuses a slot (``NoRoom``) instead of killing the writer
with a SIGBUS at its first write into a page it has no room for.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import mmap
import os
import pickle
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from trainguard.sdk._layout import address_of, rebuild, split

FORMAT = "trainguard.snapshot/1"
MAX_SLOTS = 4


class SnapshotFormatError(RuntimeError):
    """A slot's meta file is not one of ours (another version, damaged): it is skipped."""


class Replaced(FileNotFoundError):
    """A slot no longer holds the snapshot it was listed as: written over (another snapshot in it now, of
    another step or of the same one again) or being written. It is not read: its bytes are not the listed
    snapshot's."""


class NoRoom(OSError):
    """The pages of a slot could not be reserved (a full tmpfs, a quota): nothing was written. A write into a
    sparse mapping of a full tmpfs would be a SIGBUS that kills the process, so pages are reserved first."""

    def __init__(self, directory: Path, size: int, error: OSError) -> None:
        super().__init__(
            error.errno,
            f"no room for a snapshot of {size >> 20} MB in {directory}: {error.strerror or error}",
        )
        self.directory = directory
        self.size = size


class Slot:
    """A complete snapshot in a slot: its meta, and where its data is."""

    def __init__(self, directory: Path, index: int, meta: dict[str, Any]) -> None:
        self.directory = directory
        self.index = index
        self.meta = meta

    @property
    def step(self) -> int:
        return int(self.meta["step"])

    @property
    def data_path(self) -> Path:
        return self.directory / f"slot-{self.index}.data"

    @property
    def meta_path(self) -> Path:
        return self.directory / f"slot-{self.index}.meta"

    @property
    def generation(self) -> str | None:
        """What tells this snapshot from any other ever committed in the slot (``meta_body``)."""
        value = self.meta.get("generation")
        return str(value) if value is not None else None

    @contextlib.contextmanager
    def reading(self) -> Iterator[tuple[int, int]]:
        """(file descriptor, size) of the data, locked against the writer (``flock`` shared) while in use.

        Only as the snapshot it was listed as: its meta, read again once the lock is held, must be of the
        same generation, else ``Replaced`` (a FileNotFoundError) is raised. A writer may have taken the slot
        between listing and locking, and written other steps into it: its bytes are another snapshot's then.
        The meta is checked again after the read: a ``StateRegion`` changes without the lock (its meta removed
        first), so a read that a change overlapped is refused too."""
        fd = os.open(self.data_path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            self._still_listed()
            yield fd, int(self.meta["size"])
            self._still_listed()
        finally:
            os.close(fd)

    def _still_listed(self) -> None:
        try:
            now = load_meta(self.meta_path.read_bytes()).get("generation")
        except (FileNotFoundError, SnapshotFormatError):
            now = None  # being written (its meta removed first), or the slot is gone
        if self.generation is None or now != self.generation:
            raise Replaced(
                f"{self.meta_path} no longer holds the snapshot of step {self.step} it was listed as"
            )

    def meta_bytes(self) -> bytes:
        return self.meta_path.read_bytes()


def committed(directory: Path) -> list[Slot]:
    """The complete snapshots in ``directory``, newest step first; unreadable metas are skipped."""
    found = []
    for path in directory.glob("slot-*.meta"):
        try:
            index = int(path.name[len("slot-") : -len(".meta")])
            meta = load_meta(path.read_bytes())
        except (OSError, ValueError, SnapshotFormatError):
            continue
        found.append(Slot(directory, index, meta))
    return sorted(found, key=lambda slot: slot.step, reverse=True)


def slot_at(meta_path: Path) -> Slot:
    """The slot whose meta file is ``meta_path`` (``slot-N.meta``)."""
    index = int(meta_path.name[len("slot-") : -len(".meta")])
    return Slot(meta_path.parent, index, load_meta(meta_path.read_bytes()))


def meta_body(meta: dict[str, Any], size: int) -> bytes:
    """The bytes of a slot's meta file. Each gets a generation of its own (random): a reader tells by it
    whether the slot it locks still holds the snapshot it listed (``Slot.reading``), even one of the same
    step written again."""
    generation = f"{os.getpid()}-{os.urandom(8).hex()}"
    return pickle.dumps({**meta, "format": FORMAT, "size": size, "generation": generation}, protocol=4)


def load_meta(raw: bytes) -> dict[str, Any]:
    try:
        meta = pickle.loads(raw)
    except Exception as error:
        raise SnapshotFormatError(f"not a snapshot: {error}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise SnapshotFormatError("not a snapshot of this format")
    return meta


class Pending(NamedTuple):
    """A slot being written: not a snapshot until committed."""

    slot: int
    fd: int
    region: mmap.mmap
    address: int
    size: int


class SlotWriter:
    """Writes one writer's snapshots into ``directory``, reusing its mapped data files."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._maps: dict[int, tuple[int, mmap.mmap, int]] = {}  # index -> (size, map, fd)
        #: Called with a mapping's address before it is unmapped (a GPU copier unregisters it from CUDA).
        self.unmapping: Callable[[int], None] | None = None

    def write(self, meta: dict[str, Any], fill: Any, size: int) -> Slot:
        """Write a snapshot: ``fill(address)`` copies ``size`` bytes of data to ``address``; then the meta
        (which must hold ``step``) is committed. Returns the complete slot."""
        pending = self.begin(size)
        try:
            fill(pending.address)
        except BaseException:
            self.abandon(pending)
            raise
        return self.commit(pending, meta)

    def write_bytes(self, meta_raw: bytes, receive: Any, size: int) -> Slot:
        """Write a snapshot received as bytes: ``receive(memoryview)`` fills the data; ``meta_raw`` as given."""
        meta = load_meta(meta_raw)
        pending = self.begin(size)
        try:
            receive(memoryview(pending.region)[:size])
        except BaseException:
            self.abandon(pending)
            raise
        return self.commit_raw(pending, meta_raw, meta)

    def begin(self, size: int) -> Pending:
        """A free slot of ``size`` bytes, its meta removed, locked against readers until commit or abandon."""
        index, fd = self._free_slot()
        try:
            (self.directory / f"slot-{index}.meta").unlink(missing_ok=True)
            region = self._mapped(index, fd, size)
        except BaseException:
            fcntl.flock(fd, fcntl.LOCK_UN)
            if index not in self._maps:  # not kept (``NoRoom``: the slot was given up)
                os.close(fd)
            raise
        return Pending(index, fd, region, address_of(region), size)

    def commit(self, pending: Pending, meta: dict[str, Any]) -> Slot:
        body = meta_body(meta, pending.size)
        return self.commit_raw(pending, body, load_meta(body))

    def commit_raw(self, pending: Pending, body: bytes, meta: dict[str, Any]) -> Slot:
        try:
            temporary = self.directory / f".slot-{pending.slot}.meta.tmp"
            temporary.write_bytes(body)
            os.replace(temporary, self.directory / f"slot-{pending.slot}.meta")
        finally:
            fcntl.flock(pending.fd, fcntl.LOCK_UN)
        return Slot(self.directory, pending.slot, meta)

    def abandon(self, pending: Pending) -> None:
        fcntl.flock(pending.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        for _, region, fd in self._maps.values():
            if self.unmapping is not None:
                self.unmapping(address_of(region))
            with contextlib.suppress(BufferError):
                region.close()
            os.close(fd)
        self._maps.clear()

    def _free_slot(self) -> tuple[int, int]:
        """A slot that holds neither the newest complete snapshot nor a reader, locked (``flock`` exclusive)."""
        slots = committed(self.directory)
        newest = slots[0].index if slots else None
        for index in range(MAX_SLOTS):
            if index == newest:
                continue
            fd = self._fd(index)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            return index, fd
        # Every other slot is being read: wait for the oldest of them rather than write over the newest.
        index = next(i for i in range(MAX_SLOTS) if i != newest)
        fd = self._fd(index)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return index, fd

    def _fd(self, index: int) -> int:
        kept = self._maps.get(index)
        if kept is not None:
            return kept[2]
        return os.open(self.directory / f"slot-{index}.data", os.O_RDWR | os.O_CREAT, 0o600)

    def _mapped(self, index: int, fd: int, size: int) -> mmap.mmap:
        kept = self._maps.get(index)
        if kept is not None and kept[0] == size:
            return kept[1]
        if kept is not None:
            if self.unmapping is not None:
                self.unmapping(address_of(kept[1]))
            with contextlib.suppress(BufferError):
                kept[1].close()
            del self._maps[index]
        os.ftruncate(fd, size)
        try:
            reserve(fd, size, self.directory)
        except NoRoom:
            (self.directory / f"slot-{index}.data").unlink(missing_ok=True)  # truncated: nothing is left
            raise
        region = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self._maps[index] = (size, region, fd)
        return region


def reserve(fd: int, size: int, directory: Path) -> None:
    """Allocate the pages of the file ``fd`` up to ``size`` now: a file of a tmpfs is sparse, and a write into
    a page of its mapping that the filesystem has no room for is a SIGBUS, which kills the process. Raises
    ``NoRoom`` when they cannot all be had, the file truncated to nothing (what was taken is given back)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        raise NoRoom(directory, size, error) from error


def read_into_private(slot: Slot) -> Any:
    """The slot's state in this process's own memory (training may change it; the slot stays as it was)."""

    skeleton = slot.meta["skeleton"]
    with slot.reading() as (fd, size):
        storages = split(skeleton, size, lambda buffer, offset: read_exactly(fd, bytes_of(buffer), offset))
    return rebuild(skeleton, storages)


def read_data(slot: Slot) -> Any:
    """The slot's data, whole, as a CPU uint8 tensor (as a peer is sent it)."""
    import torch

    with slot.reading() as (fd, size):
        data = torch.empty(size, dtype=torch.uint8)
        read_exactly(fd, bytes_of(data), 0)
    return data


def bytes_of(tensor: Any) -> memoryview:
    """The bytes of a contiguous CPU uint8 tensor, writable."""
    return memoryview((ctypes.c_char * tensor.numel()).from_address(tensor.data_ptr())).cast("B")


def read_exactly(fd: int, into: memoryview, offset: int) -> None:
    done = 0
    while done < len(into):
        got = os.preadv(fd, [into[done:]], offset + done)
        if got <= 0:
            raise OSError(f"short read of a snapshot ({done} of {len(into)} bytes)")
        done += got


def bytes_free(directory: Path) -> int:
    """What the filesystem of ``directory`` can still take, and the memory cgroup, whichever is less."""
    stats = os.statvfs(directory)
    free = stats.f_bavail * stats.f_frsize
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        with contextlib.suppress(OSError, ValueError):
            limit = Path(limit_file).read_text().strip()
            if limit != "max" and int(limit) < (1 << 60):
                free = min(free, int(limit) - int(Path(usage_file).read_text().strip()))
            break
    return free


#: A writer's snapshots are stale once they are this many steps behind a writer of the same node and this many
#: seconds old: a pod relaunched elsewhere, a buddy that changed, a rank scaled away.
STALE_STEPS = 3
STALE_SECONDS = 10.0


def prune_stale(directory: Path, step: int, keep: set[Path], now: float | None = None) -> list[Path]:
    """Remove the writers' directories under ``directory`` (a node's) whose newest snapshot is older than
    ``step - STALE_STEPS`` and ``STALE_SECONDS``: the ranks of a job move in step, so no restore can want it
    any more (after a fault every rank resumes, then writes newer steps). ``keep``: never removed."""
    now = time.time() if now is None else now
    removed = []
    for writer in directory.glob("*-*"):
        if writer in keep or not writer.name.startswith(("own-", "buddy-")):
            continue
        slots = committed(writer)
        newest = slots[0] if slots else None
        if newest is None:
            continue  # being written for the first time
        if newest.step < step - STALE_STEPS and now - float(newest.meta.get("time", now)) > STALE_SECONDS:
            shutil.rmtree(writer, ignore_errors=True)
            removed.append(writer)
    return removed


def tree_size(directory: Path) -> int:
    """Bytes the data files under ``directory`` hold."""
    return sum(path.stat().st_size for path in directory.rglob("slot-*.data") if path.is_file())
