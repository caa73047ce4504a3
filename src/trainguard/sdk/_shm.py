"""Snapshots of a training state in shared memory, as files of a tmpfs directory (``/dev/shm`` by default).

A file in shared memory outlives the process that wrote it: a worker that torchrun restarts in the same pod
(or a pod relaunched on the same node) finds the state of its last step there, without a read from disk. The
directory is the node's: trainguard's runtime gives every pod of a node the same one and removes it when the
node is lost or the job ends.

One writer's snapshots live in a directory of their own (``own-<key>`` for a worker's own, ``buddy-<key>`` for
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
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

FORMAT = "trainguard.snapshot/1"
ALIGN = 64
MAX_SLOTS = 4
#: Copies are cut into pieces of this size so that threads share the work evenly.
CHUNK_BYTES = 8 << 20


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


class _Ref(NamedTuple):
    """Where a tensor's bytes are in a slot's data: what the meta file holds in the tensor's place."""

    offset: int
    dtype: str
    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    parameter: bool
    requires_grad: bool


class Layout:
    """A state taken apart: its skeleton (tensors replaced by ``_Ref``), and the copies that fill a data file."""

    def __init__(self, skeleton: Any, copies: list[tuple[int, Any, int]], size: int) -> None:
        self.skeleton = skeleton
        self.copies = copies  # (offset in the data, source tensor of the storage, bytes)
        self.size = size


def layout(state: Any, placed: Callable[[int], int | None] | None = None, start: int = 0) -> Layout:
    """Plan where each tensor storage of ``state`` goes; tensors that share a storage share it in the copy.
    Tensors that are not plain dense ones (sparse, quantized, subclasses) stay in the skeleton, pickled.

    ``placed(address)``: the offset of a CPU storage that is in the data already (``LiveRegion``), None for
    one to copy; copies then go from ``start`` on."""
    import torch

    offsets: dict[tuple[str, int, int], int] = {}
    copies: list[tuple[int, Any, int]] = []
    end = start
    memo: dict[int, Any] = {}

    def ref(tensor: Any) -> Any:
        nonlocal end
        plain = type(tensor) in (torch.Tensor, torch.nn.Parameter)
        unusual = tensor.layout != torch.strided or tensor.is_quantized or tensor.is_conj() or tensor.is_neg()
        if not plain or unusual or tensor.device.type == "meta":
            return tensor.detach().to("cpu", copy=True)
        storage = tensor.untyped_storage()
        key = (str(tensor.device), storage.data_ptr(), storage.nbytes())
        offset = offsets.get(key)
        if offset is None and placed is not None and tensor.device.type == "cpu":
            offset = placed(storage.data_ptr())
            if offset is not None:
                offsets[key] = offset
        if offset is None:
            offset = offsets[key] = end
            copies.append((offset, tensor, storage.nbytes()))
            end += aligned(storage.nbytes())
        return _Ref(offset, str(tensor.dtype).replace("torch.", ""), tuple(tensor.size()), tuple(tensor.stride()),
                    tensor.storage_offset(), isinstance(tensor, torch.nn.Parameter), tensor.requires_grad)  # fmt: skip

    def leaf(obj: Any) -> Any:
        if not isinstance(obj, torch.Tensor):
            return obj
        if id(obj) not in memo:
            memo[id(obj)] = ref(obj)
        return memo[id(obj)]

    return Layout(_replace_leaves(state, leaf), copies, max(end, start, 1))


def aligned(size: int) -> int:
    return -(-size // ALIGN) * ALIGN


def rebuild(skeleton: Any, storages: dict[int, Any]) -> Any:
    """The state of ``skeleton`` with its tensors on ``storages`` (``split``'s: a storage of its own for each
    storage of the original, so that tensors share memory exactly as the original's did)."""
    import torch

    def leaf(obj: Any) -> Any:
        if not isinstance(obj, _Ref):
            return obj
        dtype = getattr(torch, obj.dtype)
        out = torch.empty(0, dtype=dtype).set_(storages[obj.offset], obj.storage_offset, obj.size, obj.stride)
        if obj.parameter:
            return torch.nn.Parameter(out, requires_grad=obj.requires_grad)
        return out

    return _replace_leaves(skeleton, leaf)


def split(skeleton: Any, size: int, fill: Any) -> dict[int, Any]:
    """A CPU storage of its own for each storage the skeleton's tensors were on (by its offset in the data),
    ``fill(buffer, offset)`` filling each from the data. Never one storage for all: a restored optimizer keeps
    its state tensors, which would keep the whole snapshot alive and be snapshotted whole again."""
    import torch

    offsets: set[int] = set()

    def note(obj: Any) -> Any:
        if isinstance(obj, _Ref):
            offsets.add(obj.offset)
        return obj

    _replace_leaves(skeleton, note)
    ordered = sorted(offsets)
    storages = {}
    for index, start in enumerate(ordered):
        end = ordered[index + 1] if index + 1 < len(ordered) else size
        buffer = torch.empty(end - start, dtype=torch.uint8)
        fill(buffer, start)
        storages[start] = buffer.untyped_storage()
    return storages


def _replace_leaves(obj: Any, leaf: Any) -> Any:
    """``obj`` with its plain containers rebuilt (dicts; a module's ``OrderedDict`` state dict with its
    ``_metadata``; lists; tuples, not named ones) and every other value ``leaf(value)``."""
    kind = type(obj)
    if kind is dict:
        return {key: _replace_leaves(value, leaf) for key, value in obj.items()}
    if kind is OrderedDict:
        rebuilt: Any = OrderedDict((key, _replace_leaves(value, leaf)) for key, value in obj.items())
        rebuilt.__dict__.update(obj.__dict__)
        return rebuilt
    if kind is list:
        return [_replace_leaves(value, leaf) for value in obj]
    if kind is tuple:
        return tuple(_replace_leaves(value, leaf) for value in obj)
    return leaf(obj)


def address_of(region: mmap.mmap) -> int:
    view = ctypes.c_char.from_buffer(region)
    try:
        return ctypes.addressof(view)
    finally:
        del view


def copy_into(destination: int, copies: list[tuple[int, Any, int]], pool: Any) -> None:
    """Copy each source storage to ``destination + offset``: CPU bytes by ``memmove`` in chunks spread over
    ``pool`` (memmove releases the GIL), others (GPU) through a CPU tensor on the destination's bytes."""
    import torch

    chunks: list[tuple[int, int, int]] = []
    for offset, tensor, size in copies:
        if tensor.device.type == "cpu":
            source = tensor.untyped_storage().data_ptr()
            chunks.extend(
                (destination + offset + at, source + at, min(CHUNK_BYTES, size - at))
                for at in range(0, size, CHUNK_BYTES)
            )
        else:
            buffer = (ctypes.c_char * size).from_address(destination + offset)
            target = torch.frombuffer(buffer, dtype=torch.uint8)
            target.copy_(
                torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())
            )
    if pool is None or len(chunks) < 2:
        for chunk in chunks:
            ctypes.memmove(*chunk)
    else:
        list(pool.map(lambda chunk: ctypes.memmove(*chunk), chunks))


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
        The meta is checked again after the read: a ``LiveRegion`` changes without the lock (its meta removed
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


class LiveRegion:
    """A writer's training state kept in place: the tensors an optimizer changes (its parameters and state)
    live in a data file of shared memory, so that a snapshot copies only the rest (``Snapshots(in_place=True)``).

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


def structure(skeleton: Any) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The tensors of a state's skeleton by their place in it (``model/layer.weight``): dtype and shape."""
    found: dict[str, tuple[str, tuple[int, ...]]] = {}

    def walk(obj: Any, path: str) -> None:
        if isinstance(obj, _Ref):
            found[path] = (obj.dtype, tuple(obj.size))
        elif isinstance(obj, dict):
            for key, value in obj.items():
                walk(value, f"{path}/{key}")
        elif isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
            for index, value in enumerate(obj):
                walk(value, f"{path}/{index}")

    walk(skeleton, "")
    return found


def signature(skeleton: Any) -> str:
    """A digest of ``structure(skeleton)``: equal for two states with the same tensors in the same places."""
    import hashlib

    entries = sorted(structure(skeleton).items())
    return hashlib.sha256(repr(entries).encode()).hexdigest()[:32]


def fits(skeleton: Any, like: Any) -> str:
    """Why a snapshot of ``skeleton`` cannot be loaded into a state shaped like ``like`` (a skeleton too), or
    "" when it can: every tensor of ``like`` is in the snapshot at the same place, dtype and shape. A
    snapshot may hold more (an optimizer's state appears at its first step)."""
    mine, wanted = structure(skeleton), structure(like)
    for path, (dtype, shape) in sorted(wanted.items()):
        held = mine.get(path)
        if held is None:
            return f"it has no tensor {path}"
        if held != (dtype, shape):
            return f"its {path} is {held[0]} {list(held[1])}, the state's is {dtype} {list(shape)}"
    return ""
