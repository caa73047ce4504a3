"""``trainguard.Snapshots``: the training state of every step in shared memory, a copy on a peer, and one step
that every rank resumes from.

```python
checkpointer = trainguard.Checkpointer(directory)            # the disk tier, and SIGTERM's defer
snapshots = trainguard.Snapshots(checkpointer, persist_every=100)   # every rank, after init_process_group
restored = snapshots.restore(like=state())                    # every rank: memory, then a peer's copy, then disk
if restored is not None:
    load(restored.state); step = restored.step                # restored.source: memory, buddy, peer or disk
snapshots.save_on_sigterm(lambda: (state(), step))            # a planned stop snapshots its last whole step
for ...:
    with checkpointer.defer_sigterm():
        ... one step ...
    snapshots.save(state(), step)                             # a memmove into shared memory
```

- **Memory.** ``save`` copies the state into a file of shared memory (``trainguard.sdk._shm``): the step waits
  for that copy only. The file outlives the process, so a worker restarted in the same pod, or a pod relaunched
  on the same node, finds it.
- **Whose.** Every snapshot carries its run (``run_id``, ``$TRAININGJOB_UID`` or torchrun's ``--rdzv-id``; none
  is refused, not guessed) and its state's structure; ``restore`` takes only this run's, and with ``like`` only
  those that fit the state, and says why it passed over any other.
- **A GPU state** is copied on a side stream, after the work queued so far, into the slot's mapping registered
  with CUDA (pinned): staged on the device first when it has room, so training waits milliseconds, else straight
  from the live tensors, the next optimizer step waiting on the GPU for its own (``_devicecopy``). Every ``k``
  steps: the smallest interval whose copy hides behind it, chosen once and the same on every rank (``every``).
- **In place** (``in_place=True``, a replicated state): the optimizers' parameters and state move into a file
  of shared memory (``_shm.LiveRegion``) and train there; a snapshot copies only the rest of the state and
  commits. An optimizer step pre-hook removes the snapshot first: a rank killed inside its step has none of its
  own and gets the step from a peer.
- **A buddy.** A replicated state (DDP: every rank holds the same) needs nothing sent: every other rank's own
  copy of a step is this rank's too, and it outlives this rank's pod and node. A shard (``replicated=False``) is
  held by its rank alone, so a thread of the worker sends each new one to a peer's worker (another node's when
  there is one), which keeps it in its node's shared memory, so a pod or node lost as a whole leaves the shard
  there. Sending never blocks a step: a shard that has not reached the buddy yet is not yet *safe*
  (``safe_step``), and a newer one takes the place of one not sent yet.
- **One step for all.** ``restore`` gathers what every rank can reach and chooses once, the same on every rank
  (``trainguard.sdk._snapplan``): the newest step available for all ranks, in memory or on a buddy, else on
  disk; a rank whose node has no copy receives it from a rank whose node has (sent to it alone).
- **Disk.** Every ``persist_every``-th snapshot is written to the checkpointer's directory by a thread of its
  own, from the shared memory (no second copy in the step).
- **Limits.** A snapshot that would not fit (the filesystem of the directory, or the memory cgroup's limit) is
  not taken: one warning, and the step is saved to disk instead; so are later ones, every ``persist_every``-th
  (``FALLBACK_DISK_EVERY``-th when it is 0), never waiting for a write in progress. ``close()`` frees this
  rank's memory; the runtime removes the node's directory when the job ends.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from trainguard.sdk import _shm
from trainguard.sdk._snapplan import BUDDY, DISK, MEMORY, PEER, Held, Plan, ReshardError, choose, serves
from trainguard.sdk._world import current_world

log = logging.getLogger("trainguard.snapshots")

_T = TypeVar("_T")

#: What ``save`` returns for a step it did not snapshot (between two snapshots of a GPU state, say, or
#: between two writes to disk once memory was refused).
SKIPPED = "skipped"

ENV_DIRECTORY = "TRAINGUARD_SNAPSHOT_DIR"
ENV_HOST = "TRAINGUARD_SNAPSHOT_HOST"
#: The whole of a snapshot is refused when less than this share of what is free would be left.
HEADROOM = 1.1
#: Every this many steps a writer removes the node's stale copies (``_shm.prune_stale``).
PRUNE_EVERY = 5
#: A GPU state's snapshot interval is chosen at this many steps after the first snapshot.
DECIDE_AFTER = 3
#: How long a stopping worker of a sharded state waits for its last snapshot to reach its buddy.
FINAL_SEND_SECONDS = 10.0
#: Once memory is refused, the steps go to disk every ``persist_every`` steps, or every this many when
#: ``persist_every`` is 0.
FALLBACK_DISK_EVERY = 100

__all__ = [
    "BUDDY",
    "DISK",
    "MEMORY",
    "PEER",
    "SKIPPED",
    "ReshardError",
    "Restored",
    "Snapshots",
    "default_directory",
    "run_identity",
]


@dataclass(frozen=True)
class Restored:
    step: int
    state: Any
    #: Where this rank read it: ``memory`` (its node's own copy), ``buddy`` (a peer's copy on its node),
    #: ``peer`` (sent by another rank), ``disk`` (the newest checkpoint).
    source: str
    #: The plan every rank followed (the same on all).
    plan: Plan


def run_identity(given: str | None = None) -> str:
    """The identity of the run whose snapshots these are: ``given`` (``Snapshots(run_id=...)``), else the job's
    uid that trainguard's runtime sets (``$TRAININGJOB_UID``), else torchrun's ``--rdzv-id``
    (``$TORCHELASTIC_RUN_ID``). torchrun's default id, ``none``, is the same for every run, so it is refused
    rather than guessed with: a second run would take the first one's snapshots for its own."""
    for candidate in (given, os.environ.get("TRAININGJOB_UID"), os.environ.get("TORCHELASTIC_RUN_ID")):
        value = (candidate or "").strip()
        if value and value != "none":
            return value
    raise ValueError(
        "Snapshots needs the identity of the run, so that it never resumes another run's snapshot: pass "
        "Snapshots(run_id=...) (the same on every rank and every restart of the run), or start the job with "
        "torchrun --rdzv-id=<id> (torchrun's default run id, 'none', is every run's); trainguard's runtime "
        "sets $TRAININGJOB_UID for you"
    )


def default_directory(run: str | None = None) -> Path:
    """``$TRAINGUARD_SNAPSHOT_DIR`` (trainguard's runtime sets one per node), else a directory of the run in
    ``/dev/shm``."""
    given = os.environ.get(ENV_DIRECTORY, "").strip()
    if given:
        return Path(given)
    return Path("/dev/shm") / f"trainguard-snapshots-{os.getuid()}" / run_identity(run).replace("/", "_")


class Snapshots:
    """Per-step snapshots of a training state in shared memory, replicated to a peer (see the module).

    ``replicated=True``: every rank holds the same state (DDP), any copy serves every rank. ``False``: each rank
    holds its own shard; a step is usable when every shard of it can be reached, by a world of the same size,
    and with ``buddy`` each shard is also sent to a peer. Construct it on every rank at the same point (after
    ``init_process_group``): the ranks of a sharded state exchange addresses there.

    When a snapshot does not fit in memory (the free-space check, or its pages could not be reserved), it goes
    to disk with one warning, and so do later steps, to disk only: every ``persist_every``-th step, or every
    ``FALLBACK_DISK_EVERY``-th (100) when ``persist_every`` is 0. A step due while the last write is still in
    progress is skipped rather than waited for (``save`` returns ``skipped``): the steps keep their speed.
    """

    def __init__(
        self,
        checkpointer: Any,
        *,
        persist_every: int = 0,
        replicated: bool = True,
        buddy: bool = True,
        directory: str | os.PathLike[str] | None = None,
        optimizers: Sequence[Any] = (),
        in_place: bool = False,
        run_id: str | None = None,
        every: int | None = None,
        gpu_staging: bool | None = None,
    ) -> None:
        if persist_every < 0:
            raise ValueError(f"Snapshots(persist_every={persist_every}): must be 0 (never) or more")
        if in_place and not optimizers:
            raise ValueError(
                "Snapshots(in_place=True) needs optimizers=[...]: their tensors are what it keeps"
            )
        if in_place and not replicated:
            raise ValueError(
                "Snapshots(in_place=True) needs replicated=True: a shard is sent to its buddy while training "
                "goes on, so it must be a copy"
            )
        self.checkpointer = checkpointer
        self.persist_every = persist_every
        self.replicated = replicated
        #: Every snapshot carries it; restore takes only snapshots of this run (``run_identity``).
        self.run = run_identity(run_id)
        self.directory = Path(directory) if directory is not None else default_directory(self.run)
        self._skipped_writers: set[str] = set()
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        world = current_world()
        self.rank, self.world_size = world.rank, world.world_size
        pod = os.environ.get("TRAININGJOB_POD_NAME") or socket.gethostname()
        self.key = f"{pod}-{world.local_rank}".replace("/", "_")
        self._writer = _shm.SlotWriter(self.directory / f"own-{self.key}")
        threads = max(1, _torch_threads())
        self._pool = (
            ThreadPoolExecutor(threads, thread_name_prefix="trainguard-snapshot") if threads > 1 else None
        )
        self._latest: _shm.Slot | None = None
        self._optimizers = list(optimizers)
        self._copier = ThreadPoolExecutor(1, thread_name_prefix="trainguard-snapshot-copy")
        self._copying: Future[None] | None = None
        self._hooks = [optimizer.register_step_pre_hook(self._before_step) for optimizer in self._optimizers]
        self._live = _shm.LiveRegion(self.directory / f"own-{self.key}.live") if in_place else None
        self._in_memory = True  # False once a snapshot did not fit: saves go to disk
        if every is not None and every < 1:
            raise ValueError(f"Snapshots(every={every}): must be 1 or more (None: chosen for a GPU state)")
        self._every = every
        self._staging = gpu_staging
        self._device: Any = None  # _devicecopy.DeviceCopy, made at the first snapshot of a GPU state
        self._flight: Any = None  # the GPU copy under way
        self._committing: Future[None] | None = None
        self._copy_seconds = 0.0
        self._on_device = False
        self._first_step: int | None = None
        self._interval: int | None = None
        self._last_call: float | None = None
        self._step_seconds: list[float] = []
        self._warned_in_place = False
        self._changed = threading.Condition()
        self._closed = False
        self._safe_step: int | None = None
        self._persisting: threading.Thread | None = None
        self._receiver: _Receiver | None = None
        self._buddy: tuple[str, int] | None = None
        self._sender: threading.Thread | None = None
        self._buddy_failing = False
        self.buddy_name: str | None = None
        # A replicated state needs no copy sent: every other rank's own copy of a step is this rank's, and
        # outlives this rank's pod and node. Only a shard, held by its rank alone, is sent to a buddy.
        if buddy and not replicated and self.world_size > 1 and _distributed():
            self._pair_up()

    # -- saving ---------------------------------------------------------------------------------------------

    @property
    def safe_step(self) -> int | None:
        """The newest step with a copy outside this rank's memory: for a shard, the newest that reached its
        buddy; for a replicated state, the newest in memory (every other rank's own copy of it is a replica)."""
        if self.replicated and self.world_size > 1:
            return self.latest_step
        return self._safe_step

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

    @property
    def latest_step(self) -> int | None:
        return self._latest.step if self._latest is not None else None

    def save(self, state: Any, step: int) -> str:
        """Snapshot ``state`` as of ``step`` into shared memory (or to disk when it does not fit there).
        Returns where it went: ``memory`` or ``disk``, or ``skipped`` for a step between two snapshots (a GPU
        state is snapshotted every ``every`` steps; once memory is refused, the disk gets every
        ``persist_every``-th step: see the class). With ``optimizers``, the copy of their
        parameters and state goes on in the background until the next ``optimizer.step()``, which waits for
        it."""
        if not self._due(step):
            return SKIPPED
        return self._save(state, step)

    def _save(self, state: Any, step: int, last: bool = False) -> str:
        try:
            return self._save_now(state, step, last)
        except _shm.NoRoom as error:  # past the free-space check, yet the pages were not there (taken since)
            return self._refuse(state, step, error.size)

    def _save_now(self, state: Any, step: int, last: bool) -> str:
        self._finish_copy()
        self._finish_device()
        if not self._in_memory:
            return self._to_disk(state, step, last=last)
        kept = self._kept() if self._live is not None else []
        if kept and all(t.device.type == "cpu" and type(t).__name__ in ("Tensor", "Parameter") for t in kept):
            return self._save_in_place(state, step, kept)
        if kept and not self._warned_in_place:
            self._warned_in_place = True
            log.warning(
                "Snapshots(in_place=True) keeps CPU tensors in shared memory; this state's optimizer tensors are "
                "on %s: they are copied instead (on a side stream, into pinned shared memory)",
                next(t.device for t in kept if t.device.type != "cpu"),
            )
        plan = _shm.layout(state)
        self._on_device = any(copy[1].device.type == "cuda" for copy in plan.copies)
        if self._latest is None or plan.size > int(self._latest.meta["size"]):
            room = _shm.bytes_free(self.directory) + _shm.tree_size(self._writer.directory)
            if plan.size * 2 * HEADROOM > room:
                self._in_memory = False
                log.warning(
                    "a snapshot of %d MB does not fit twice in %s (%d MB free, counting the memory limit): "
                    "saving to disk instead (%s)",
                    plan.size >> 20,
                    self.directory,
                    room >> 20,
                    self.checkpointer.directory,
                )
                return self._to_disk(state, step, first=True)
        meta = self._meta(step, plan.skeleton)
        body = _shm.meta_body(meta, plan.size)  # now: the state's Python objects may change after return
        guarded = self._guarded()
        if self._on_device:
            return self._save_device(plan, body, step, guarded)
        later = [copy for copy in plan.copies if _storage_of(copy[1]) in guarded]
        now = [copy for copy in plan.copies if _storage_of(copy[1]) not in guarded]
        pending = self._writer.begin(plan.size)
        try:
            _shm.copy_into(pending.address, now, self._pool)
        except BaseException:
            self._writer.abandon(pending)
            raise
        if later:  # parameters and optimizer state: copied while the next forward and backward run
            self._copying = self._copier.submit(self._complete, pending, later, body, step)
        else:
            self._complete(pending, later, body, step)
        return MEMORY

    def _save_device(self, plan: _shm.Layout, body: bytes, step: int, guarded: set[int]) -> str:
        """A state with GPU tensors: its CPU part is copied now, its GPU part on a side stream into the slot's
        pinned mapping (``_devicecopy``); a thread commits the slot once the GPU has copied the last byte."""
        device = self._device_copy()
        on_gpu = [copy for copy in plan.copies if copy[1].device.type == "cuda" and copy[2] > 0]
        on_cpu = [copy for copy in plan.copies if copy[1].device.type != "cuda"]
        pending = self._writer.begin(plan.size)
        try:
            device.register(pending.address, pending.size)
            _shm.copy_into(pending.address, on_cpu, self._pool)
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
        now = time.perf_counter()
        if self._last_call is not None:
            self._step_seconds.append(now - self._last_call)
        self._last_call = now
        if self._every is not None:
            return step % self._every == 0
        if self._first_step is None:
            self._first_step = step
            return True
        if not self._on_device:
            return True
        if self._interval is None:
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
        every = max(_all_gather(mine)) if _distributed() and self.world_size > 1 else mine
        log.warning(
            "snapshots of this GPU state every %d steps (%s copy of %.0f ms, step of %.1f ms); set "
            "Snapshots(every=...) to choose",
            every, device.mode, self._copy_seconds * 1000, step_seconds * 1000,
        )  # fmt: skip
        return int(every)

    def _save_in_place(self, state: Any, step: int, kept: list[Any]) -> str:
        """``in_place``: the optimizers' tensors are in the live region already (moved there by the first
        save, or again when they change); only the rest of ``state`` is copied, into the region's tail."""
        live = self._live
        assert live is not None
        plan = self._in_place_plan(state, {}) if live.holds(kept) else None
        if plan is None:  # the first save, the optimizers' tensors changed, or the rest outgrew the tail
            storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in kept}
            need = sum(_shm.aligned(size) for size in storages.values())
            rest = _shm.layout(state, lambda address: 0 if address in storages else None).size
            tail = rest + rest // 4 + (1 << 20)  # room for the rest to grow a little without another move
            if (need + tail) * HEADROOM > _shm.bytes_free(self.directory) + live.size:
                return self._refuse(state, step, need + tail)
            plan = self._in_place_plan(state, live.rehome(kept, tail))
            assert plan is not None
        live.dirty()  # a second save of the same step (SIGTERM's) writes the tail again
        meta = self._meta(step, plan.skeleton)
        _shm.copy_into(live.base, plan.copies, self._pool)
        body = _shm.meta_body(meta, live.size)
        slot = live.commit(body, _shm.load_meta(body))
        with self._changed:
            self._latest = slot
            self._changed.notify_all()
        # The region changes with the next optimizer step: the disk gets a copy taken now, written by a thread
        # (skipped while the last one is still being written, as with copies: memory holds this step).
        if self.persist_every and step % self.persist_every == 0 and not self.checkpointer.writing:
            self.checkpointer.save_async(state, step)
        if step % PRUNE_EVERY == 0:
            _shm.prune_stale(self.directory, step, keep={self._writer.directory, live.directory})
        return MEMORY

    def _meta(self, step: int, skeleton: Any) -> dict[str, Any]:
        """What a slot's meta says of its snapshot: the step, who wrote it, of which run, the state's structure
        (``signature``: its tensors' places, dtypes and shapes) and its skeleton."""
        return {"step": step, "rank": self.rank, "world_size": self.world_size, "replicated": self.replicated,
                "run": self.run, "signature": _shm.signature(skeleton), "skeleton": skeleton,
                "time": time.time()}  # fmt: skip

    def _in_place_plan(self, state: Any, moved: dict[int, int]) -> _shm.Layout | None:
        """Where ``state`` goes in the live region (None when its rest does not fit the tail): the kept
        storages where they are (``moved``: where those of a state taken before a move went), the rest copied
        into the tail."""
        live = self._live
        assert live is not None

        def placed(address: int) -> int | None:
            offset = live.offset_of(address)
            return moved.get(address) if offset is None else offset

        plan = _shm.layout(state, placed, live.kept_end)
        return plan if plan.size <= live.size else None

    def _refuse(self, state: Any, step: int, size: int) -> str:
        """A snapshot that does not fit: this one and every later one go to disk (one warning)."""
        self._in_memory = False
        log.warning(
            "a snapshot of %d MB does not fit in %s (%d MB free, counting the memory limit): saving to disk "
            "instead (%s)",
            size >> 20,
            self.directory,
            _shm.bytes_free(self.directory) >> 20,
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

    def _complete(self, pending: _shm.Pending, copies: list[Any], body: bytes, step: int) -> None:
        try:
            _shm.copy_into(pending.address, copies, self._pool)
        except BaseException:
            self._writer.abandon(pending)
            raise
        self._commit(pending, body, step)

    def _commit(self, pending: _shm.Pending, body: bytes, step: int) -> None:
        # The meta read back from its bytes, not the live objects: the state may have changed since save().
        slot = self._writer.commit_raw(pending, body, _shm.load_meta(body))
        with self._changed:
            self._latest = slot
            self._changed.notify_all()
        if self.persist_every and step % self.persist_every == 0:
            self._persist(slot)
        if step % PRUNE_EVERY == 0:
            _shm.prune_stale(self.directory, step, keep={self._writer.directory})

    def _before_step(self, *_: Any) -> None:
        """An optimizer's step pre-hook: the tensors it changes must be copied first (``_finish_copy``; for
        GPU tensors the step waits on the GPU), and the live region holds no snapshot while they change."""
        self._finish_copy()
        if self._device is not None:
            self._device.before_step(self._flight)
        if self._live is not None:
            self._live.dirty()

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

    def _finish_copy(self, *_: Any) -> None:
        """Wait for the copy of the last snapshot's parameters and optimizer state (an optimizer's step
        pre-hook: they must not change before they are copied)."""
        copying, self._copying = self._copying, None
        if copying is not None:
            copying.result()

    def _guarded(self) -> set[int]:
        """The storages that change only in an optimizer's step: the optimizers' parameters and state."""
        return {_storage_of(tensor) for tensor in self._kept()}

    def save_on_sigterm(self, get_state: Callable[[], tuple[Any, int]]) -> None:
        """On SIGTERM (torchrun's stop before a resize, a pod's stop), after the step in progress (the
        checkpointer's ``defer_sigterm``): snapshot it, give the buddy a moment to receive it, and end."""
        self.checkpointer.on_sigterm(get_state, self._save_final)

    def _save_final(self, state: Any, step: int) -> None:
        self._finish_copy()
        self._finish_device()
        if self.latest_step != step:
            self._save(state, step, last=True)  # whether or not the step is due: it is the last one
            self._finish_copy()
            self._finish_device()
        # A shard lives on this rank alone: its buddy's copy is what survives this node. A replicated state
        # sends nothing: its step is in every stopping rank's memory alike.
        if not self.replicated:
            self.wait_safe(FINAL_SEND_SECONDS)
        elsewhere = " (every rank holds it)" if self.replicated else ", on the buddy too"
        log.warning("SIGTERM: snapshot of step %d in memory%s", step,
                    elsewhere if self.safe_step == step else "")  # fmt: skip

    def wait_safe(self, seconds: float) -> bool:
        """Wait until the newest snapshot has reached the buddy (True), or ``seconds`` (False); False at once
        while the buddy cannot be reached."""
        self._finish_copy()
        deadline = time.monotonic() + seconds
        with self._changed:
            while (
                self._sender is not None and self._latest is not None and self._safe_step != self._latest.step
            ):
                if self._buddy_failing:  # gone (a lost peer): waiting would only delay the stop
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def wait(self) -> None:
        """Wait for the snapshot being taken, and a write to disk in progress."""
        self._finish_copy()
        self._finish_device()
        thread = self._persisting
        if thread is not None:
            thread.join()
        self.checkpointer.wait()

    def close(self, free: bool = True) -> None:
        """Stop replicating; with ``free``, remove this rank's own snapshots from memory (the job is done)."""
        self.wait()
        for hook in self._hooks:
            hook.remove()
        self._copier.shutdown()
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if self._receiver is not None:
            self._receiver.stop()
        self._writer.close()
        if self._device is not None:
            self._device.close()
        if self._live is not None:
            self._live.close()
        if free:
            shutil.rmtree(self._writer.directory, ignore_errors=True)
            if self._live is not None:
                shutil.rmtree(self._live.directory, ignore_errors=True)

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

    # -- restoring ------------------------------------------------------------------------------------------

    def restore(self, map_location: Any = "cpu", *, like: Any = None) -> Restored | None:
        """The state every rank resumes from, chosen together (call it on every rank): the newest step
        reachable for all ranks in memory (own or buddy copies), else on disk. ``None``: start afresh.

        Only this run's snapshots count (``run_id``); ``like``, the state the script would save now (its
        fresh model and optimizer), also passes over snapshots of another structure: a tensor of ``like``
        missing from the snapshot, or of another dtype or shape. Each one passed over gets a warning that
        says why."""
        self._finish_copy()
        self._finish_device()
        mine = self._held(_shm.layout(like).skeleton if like is not None else None)
        disk = self.checkpointer.checkpoints()
        disk_step = disk[-1][0] if disk else None
        if _distributed() and self.world_size > 1:
            gathered = _all_gather((mine, disk_step))
            held = [entries for entries, _ in gathered]
            disk_steps = [step for _, step in gathered if step is not None]
            disk_step = max(disk_steps) if disk_steps else None
        else:
            held = [mine]
        plan = choose(held, disk_step, replicated=self.replicated)
        if plan is None:
            return None
        if plan.note:
            log.warning("%s", plan.note)
        source = plan.sources[self.rank]
        if source == DISK:
            latest = self.checkpointer.load_latest(map_location=map_location)
            if latest is None:
                raise RuntimeError(
                    f"the checkpoint of step {plan.step} in {self.checkpointer.directory} is gone"
                )
            return Restored(latest.step, latest.state, DISK, plan)
        state = None
        if source != PEER:
            entry = next(
                e for e in held[self.rank] if serves(e, plan.step, plan.shards[self.rank], self.replicated)
            )
            state = _read_chosen(entry, _shm.read_into_private)
        for fetch in plan.fetches:
            state = self._transfer(fetch, plan, held[self.rank], state)
        return Restored(plan.step, state, source, plan)

    def _held(self, like: Any = None) -> list[Held]:
        """The complete snapshots of this run in this node's directory (its writers' own, and buddies'
        copies) that fit the skeleton ``like``; another run's are named in a warning, and removed once stale."""
        found = []
        for directory in sorted(self.directory.glob("*-*")):
            buddy = directory.name.startswith("buddy-")
            if not (buddy or directory.name.startswith("own-")):
                continue
            for slot in _shm.committed(directory):
                meta = slot.meta
                why = self._foreign(slot, like)
                if why:
                    if str(directory) not in self._skipped_writers:
                        self._skipped_writers.add(str(directory))
                        log.warning("not resuming from the snapshot of step %s in %s: %s", meta.get("step"),
                                    directory, why)  # fmt: skip
                    continue
                entry = Held(int(meta["step"]), int(meta["rank"]), int(meta["world_size"]),
                             bool(meta["replicated"]), buddy, str(slot.meta_path))  # fmt: skip
                found.append(entry)
        return found

    def _foreign(self, slot: _shm.Slot, like: Any) -> str:
        """Why ``slot`` is not a snapshot this run can resume from ("" when it is). Another run's writer
        directory is removed once its newest snapshot is ``_shm.STALE_SECONDS`` old: no run writes there now."""
        run = slot.meta.get("run")
        if run != self.run:
            if time.time() - float(slot.meta.get("time", 0)) > _shm.STALE_SECONDS:
                shutil.rmtree(slot.directory, ignore_errors=True)
                return f"it belongs to run {run!r}, this is run {self.run!r} (stale: removed)"
            return f"it belongs to run {run!r}, this is run {self.run!r}"
        if like is not None:
            why = _shm.fits(slot.meta["skeleton"], like)
            if why:
                return f"its state does not fit this one: {why}"
        return ""

    def _transfer(self, fetch: Any, plan: Plan, mine: list[Held], state: Any) -> Any:
        """Rank ``fetch.source`` sends its copy of the shard to each rank of ``fetch.to``, and to no other (the
        header, small, goes to all: every rank takes part in the same collectives)."""
        import torch
        import torch.distributed as dist

        header: list[Any] = [None]
        data = None
        if self.rank == fetch.source:
            entry = next(e for e in mine if serves(e, plan.step, fetch.shard, self.replicated))
            skeleton, data = _read_chosen(entry, lambda slot: (slot.meta["skeleton"], _shm.read_data(slot)))
            header = [(skeleton, data.numel())]
        dist.broadcast_object_list(header, src=fetch.source)
        skeleton, size = header[0]
        if self.rank == fetch.source:
            assert data is not None
            for rank in fetch.to:
                dist.send(data, dst=rank)
        if self.rank in fetch.to:
            received = torch.empty(size, dtype=torch.uint8)
            dist.recv(received, src=fetch.source)
            storages = _shm.split(
                skeleton,
                size,
                lambda buffer, offset: buffer.copy_(received[offset : offset + buffer.numel()]),
            )
            return _shm.rebuild(skeleton, storages)
        return state

    # -- the buddy ------------------------------------------------------------------------------------------

    def _pair_up(self) -> None:
        token = _broadcast_token()
        node = os.environ.get("TRAINGUARD_NODE_NAME") or os.environ.get("NODE_NAME") or socket.gethostname()
        self._receiver = _Receiver(self.directory, _bind_host(), token)
        peers = _all_gather((node, self._receiver.address, self.key))
        buddy = _buddy_of(self.rank, [peer[0] for peer in peers])
        if buddy is None:
            return
        self._buddy = peers[buddy][1]
        self.buddy_name = peers[buddy][2]
        self._sender = threading.Thread(
            target=self._send_loop, args=(token,), name="trainguard-snapshot-sender", daemon=True
        )
        self._sender.start()

    def _send_loop(self, token: str) -> None:
        sent: int | None = None
        while True:
            with self._changed:
                while not self._closed and (self._latest is None or self._latest.step == sent):
                    self._changed.wait()
                if self._closed:
                    return
                slot = self._latest
            assert slot is not None
            assert self._buddy is not None
            try:
                _send(self._buddy, token, self.key, slot)
            except FileNotFoundError:
                continue  # written over meanwhile: the newer one goes next
            except OSError as error:
                with self._changed:
                    if not self._buddy_failing:
                        print(f"trainguard: snapshots cannot reach the buddy {self._buddy}: {error}; retrying",
                              file=sys.stderr, flush=True)  # fmt: skip
                    self._buddy_failing = True
                    self._changed.notify_all()
                    self._changed.wait(1.0)
                continue
            sent = slot.step
            with self._changed:
                self._buddy_failing = False
                self._safe_step = slot.step
                self._changed.notify_all()


def _read_chosen(entry: Held, read: Callable[[_shm.Slot], _T]) -> _T:
    """``read(slot)`` of the slot the plan chose (``entry``), only while it holds the snapshot of the chosen
    step that was listed: a slot written over since (another snapshot in it now, or being written) fails the
    restore with a RuntimeError rather than give this rank another step than the other ranks resume from."""
    try:
        slot = _shm.slot_at(Path(entry.path))
        if slot.step != entry.step:
            raise _shm.Replaced(f"{entry.path} holds the snapshot of step {slot.step} now")
        return read(slot)
    except (FileNotFoundError, _shm.SnapshotFormatError) as error:
        raise RuntimeError(
            f"restore: the snapshot of step {entry.step} that every rank chose was written over before this "
            f"rank read it ({error}); start again to choose anew"
        ) from error


def _storage_of(tensor: Any) -> int:
    return int(tensor.untyped_storage().data_ptr())


def _buddy_of(rank: int, nodes: list[str]) -> int | None:
    """The next rank (cyclically) on another node, else the next rank; None alone."""
    world = len(nodes)
    if world < 2:
        return None
    order = [(rank + step) % world for step in range(1, world)]
    elsewhere = [other for other in order if nodes[other] != nodes[rank]]
    return (elsewhere or order)[0]


# -- the wire: one snapshot per connection ------------------------------------------------------------------
# header (one JSON line: token, key, meta and data lengths), the meta's bytes, the data's bytes; the receiver
# answers one line, "ok <step>", once the slot is complete in its memory.


def _send(address: tuple[str, int], token: str, key: str, slot: _shm.Slot) -> None:
    with slot.reading() as (fd, size), socket.create_connection(address, timeout=30) as conn:
        meta = slot.meta_bytes()  # under the lock: the meta ``reading`` found to be the listed one
        header = {"token": token, "key": key, "meta": len(meta), "data": size}
        conn.sendall(json.dumps(header).encode() + b"\n" + meta)
        with os.fdopen(os.dup(fd), "rb") as handle:
            conn.sendfile(handle, 0, size)
        answer = conn.makefile("rb").readline().decode().strip()
    if answer != f"ok {slot.step}":
        raise OSError(f"the buddy answered {answer!r}")


class _Receiver:
    """Keeps the snapshots peers send in this node's shared memory (``buddy-<sender's key>``)."""

    def __init__(self, directory: Path, host: str, token: str) -> None:
        self.directory = directory
        self.token = token
        self._server = socket.create_server((host, 0))
        self.address = (host, self._server.getsockname()[1])
        self._writers: dict[str, _shm.SlotWriter] = {}
        self._stopped = False
        threading.Thread(target=self._serve, name="trainguard-snapshot-receiver", daemon=True).start()

    def stop(self) -> None:
        self._stopped = True
        self._server.close()
        for writer in self._writers.values():
            writer.close()

    def _serve(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._take, args=(conn,), daemon=True).start()

    def _take(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(60)
            reader = conn.makefile("rb")
            try:
                header = json.loads(reader.readline(4096))
                if header.get("token") != self.token or "/" in str(header.get("key")):
                    return
                meta = _read_full(reader, int(header["meta"]))
                key, size = str(header["key"]), int(header["data"])
                writer = self._writers.get(key)
                held = _shm.tree_size(self.directory / f"buddy-{key}")
                if size * HEADROOM > _shm.bytes_free(self.directory) + held:
                    conn.sendall(b"full\n")  # the sender's snapshot stays unsafe; this node keeps working
                    return
                if writer is None:
                    writer = self._writers[key] = _shm.SlotWriter(self.directory / f"buddy-{key}")
                try:
                    slot = writer.write_bytes(meta, lambda view: _read_into(reader, view), size)
                except _shm.NoRoom:  # past the check, yet the pages were not there (taken since)
                    conn.sendall(b"full\n")
                    return
                conn.sendall(f"ok {slot.step}\n".encode())
            except (OSError, ValueError, KeyError, _shm.SnapshotFormatError):
                return


def _read_full(reader: Any, size: int) -> bytes:
    data = reader.read(size)
    if len(data) != size:
        raise OSError("the connection ended inside a snapshot")
    return bytes(data)


def _read_into(reader: Any, view: memoryview) -> None:
    done = 0
    while done < len(view):
        got = reader.readinto(view[done:])
        if not got:
            raise OSError("the connection ended inside a snapshot")
        done += got


# -- torch.distributed ---------------------------------------------------------------------------------------


def _distributed() -> bool:
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def _all_gather(value: Any) -> list[Any]:
    import torch.distributed as dist

    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def _broadcast_token() -> str:
    import torch.distributed as dist

    box = [secrets.token_hex(16) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return str(box[0])


def _bind_host() -> str:
    """Where peers reach this rank: ``$TRAINGUARD_SNAPSHOT_HOST``, loopback when the job's master is on it
    (one machine), else ``$POD_IP`` or this host's address."""
    given = os.environ.get(ENV_HOST, "").strip()
    if given:
        return given
    master = os.environ.get("MASTER_ADDR", "")
    try:
        if master and socket.gethostbyname(master).startswith("127."):
            return "127.0.0.1"
    except OSError:
        pass
    return os.environ.get("POD_IP", "").strip() or socket.gethostbyname(socket.gethostname())


def _torch_threads() -> int:
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else 1
