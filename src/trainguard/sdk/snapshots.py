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
  from the training's own tensors, the next optimizer step waiting on the GPU for its own (``_devicecopy``). Every ``k``
  steps: the smallest interval whose copy hides behind it, chosen once and the same on every rank (``every``).
- **In place** (``in_place=True``, a replicated state): the optimizers' parameters and state move into a file
  of shared memory (``_region.StateRegion``) and train there; a snapshot copies only the rest of the state and
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

import logging
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.pod import contract
from trainguard.sdk import _layout, _shm
from trainguard.sdk._buddy import Receiver, Sender, pair
from trainguard.sdk._disk import HEADROOM, SKIPPED, DiskTier
from trainguard.sdk._dist import distributed
from trainguard.sdk._gpusnapshots import GpuSnapshots
from trainguard.sdk._inplace import InPlace, storage_of
from trainguard.sdk._region import StateRegion
from trainguard.sdk._restore import agree, follow, held_here
from trainguard.sdk._snapplan import MEMORY, Held, Plan
from trainguard.sdk._world import current_world

log = logging.getLogger("trainguard.snapshots")

#: Every this many steps a writer removes the node's stale copies (``_shm.prune_stale``).
PRUNE_EVERY = 5
#: How long a stopping worker of a sharded state waits for its last snapshot to reach its buddy.
FINAL_SEND_SECONDS = 10.0

__all__ = [
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
    for candidate in (
        given,
        os.environ.get(contract.ENV_JOB_UID),
        os.environ.get(contract.TORCHELASTIC_RUN_ID),
    ):
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
    given = os.environ.get(contract.ENV_SNAPSHOT_DIR, "").strip()
    if given:
        return Path(given)
    return Path("/dev/shm") / f"trainguard-snapshots-{os.getuid()}" / run_identity(run).replace("/", "_")


class Snapshots(GpuSnapshots, InPlace, DiskTier):
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

    # Its parts, each a module of its own: a GPU state's snapshots and their interval (``_gpusnapshots``), the
    # optimizers' tensors, copied behind the step or kept in place (``_inplace``), the disk (``_disk``); and,
    # not mixed in, the buddy (``_buddy``) and the restore side (``_restore``).

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
        pod = os.environ.get(contract.ENV_POD_NAME) or socket.gethostname()
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
        self._region = StateRegion(self.directory / f"own-{self.key}.live") if in_place else None
        self._in_memory = True  # False once a snapshot did not fit: saves go to disk
        self._init_gpu(every, gpu_staging)
        self._warned_in_place = False
        self._changed = threading.Condition()
        self._persisting: threading.Thread | None = None
        self._receiver: Receiver | None = None
        self._sender: Sender | None = None
        self.buddy_name: str | None = None
        # A replicated state needs no copy sent: every other rank's own copy of a step is this rank's, and
        # outlives this rank's pod and node. Only a shard, held by its rank alone, is sent to a buddy.
        if buddy and not replicated and self.world_size > 1 and distributed():
            self._receiver, self._sender = pair(
                self.directory, self.key, self.rank, self._changed, lambda: self._latest
            )
            self.buddy_name = self._sender.name if self._sender is not None else None

    # -- saving ---------------------------------------------------------------------------------------------

    @property
    def safe_step(self) -> int | None:
        """The newest step with a copy outside this rank's memory: for a shard, the newest that reached its
        buddy; for a replicated state, the newest in memory (every other rank's own copy of it is a replica)."""
        if self.replicated and self.world_size > 1:
            return self.latest_step
        return self._sender.safe_step if self._sender is not None else None

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
        in_place = self._try_in_place(state, step)
        if in_place is not None:
            return in_place
        plan = _layout.layout(state)
        self._on_device = any(copy[1].device.type == "cuda" for copy in plan.copies)
        if self._latest is None or plan.size > int(self._latest.meta["size"]):
            room = _shm.bytes_free(self.directory) + _shm.tree_size(self._writer.directory)
            if plan.size * 2 * HEADROOM > room:
                return self._refuse(state, step, plan.size, room, twice=True)
        meta = self._meta(step, plan.skeleton)
        body = _shm.meta_body(meta, plan.size)  # now: the state's Python objects may change after return
        guarded = self._guarded()
        if self._on_device:
            return self._save_device(plan, body, step, guarded)
        later = [copy for copy in plan.copies if storage_of(copy[1]) in guarded]
        now = [copy for copy in plan.copies if storage_of(copy[1]) not in guarded]
        pending = self._writer.begin(plan.size)
        try:
            _layout.copy_into(pending.address, now, self._pool)
        except BaseException:
            self._writer.abandon(pending)
            raise
        if later:  # parameters and optimizer state: copied while the next forward and backward run
            self._copying = self._copier.submit(self._complete, pending, later, body, step)
        else:
            self._complete(pending, later, body, step)
        return MEMORY

    def _meta(self, step: int, skeleton: Any) -> dict[str, Any]:
        """What a slot's meta says of its snapshot: the step, who wrote it, of which run, and its skeleton, which
        is the state's structure too (each tensor's place, dtype and shape: what ``restore(like=...)`` compares,
        ``_layout.fits``)."""
        return {"step": step, "rank": self.rank, "world_size": self.world_size, "replicated": self.replicated,
                "run": self.run, "skeleton": skeleton,
                "time": time.time()}  # fmt: skip

    def _complete(self, pending: _shm.Pending, copies: list[Any], body: bytes, step: int) -> None:
        try:
            _layout.copy_into(pending.address, copies, self._pool)
        except BaseException:
            self._writer.abandon(pending)
            raise
        self._commit(pending, body, step)

    def _commit(self, pending: _shm.Pending, body: bytes, step: int) -> None:
        # The meta read back from its bytes, not the objects in use: the state may have changed since save().
        slot = self._writer.commit_raw(pending, body, _shm.load_meta(body))
        with self._changed:
            self._latest = slot
            self._changed.notify_all()
        if self.persist_every and step % self.persist_every == 0:
            self._persist(slot)
        self._prune(step)

    def _prune(self, step: int, *also: Path) -> None:
        """Every ``PRUNE_EVERY`` steps, remove the node's stale copies but this writer's (and ``also``)."""
        if step % PRUNE_EVERY == 0:
            _shm.prune_stale(self.directory, step, keep={self._writer.directory, *also})

    def _finish_copy(self, *_: Any) -> None:
        """Wait for the copy of the last snapshot's parameters and optimizer state (an optimizer's step
        pre-hook: they must not change before they are copied)."""
        copying, self._copying = self._copying, None
        if copying is not None:
            copying.result()

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
        return self._sender is None or self._sender.wait_safe(seconds)

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
        if self._sender is not None:
            self._sender.stop()
        if self._receiver is not None:
            self._receiver.stop()
        self._writer.close()
        if self._device is not None:
            self._device.close()
        if self._region is not None:
            self._region.close()
        if free:
            shutil.rmtree(self._writer.directory, ignore_errors=True)
            if self._region is not None:
                shutil.rmtree(self._region.directory, ignore_errors=True)

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
        mine = self._held(_layout.layout(like).skeleton if like is not None else None)
        plan, held = agree(mine, self.checkpointer, self.world_size, self.replicated)
        if plan is None:
            return None
        step, state, source = follow(plan, held, self.rank, self.replicated, self.checkpointer, map_location)
        return Restored(step, state, source, plan)

    def _held(self, like: Any = None) -> list[Held]:
        """The complete snapshots of this run in this node's directory that fit the skeleton ``like``."""
        return held_here(self.directory, self.run, like, self._skipped_writers)


def _torch_threads() -> int:
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else 1
