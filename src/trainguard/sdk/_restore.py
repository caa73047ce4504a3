"""The restore side of ``Snapshots``: what the node's shared memory holds of this run (``held_here``), the plan
every rank agrees on (``agree``: ``_snapplan.choose`` on what every rank gathered), and this rank's part of it
(``follow``): the chosen step read from its node's memory or from disk, or sent by a rank that has it
(``transfer``). A slot is read only as the snapshot the plan chose (``read_chosen``)."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from trainguard.sdk import _layout, _shm
from trainguard.sdk._dist import all_gather, distributed
from trainguard.sdk._snapplan import DISK, PEER, Held, Plan, choose, serves

log = logging.getLogger("trainguard.snapshots")

_T = TypeVar("_T")


def held_here(directory: Path, run: str, like: Any, warned: set[str]) -> list[Held]:
    """The complete snapshots of ``run`` in the node's ``directory`` (its writers' own, and buddies' copies)
    that fit the skeleton ``like``; another run's are named in a warning (once a writer's directory: ``warned``
    holds those named), and removed once stale."""
    found = []
    for writer in sorted(directory.glob("*-*")):
        buddy = writer.name.startswith("buddy-")
        if not (buddy or writer.name.startswith("own-")):
            continue
        for slot in _shm.committed(writer):
            meta = slot.meta
            why = foreign(slot, run, like)
            if why:
                if str(writer) not in warned:
                    warned.add(str(writer))
                    log.warning("not resuming from the snapshot of step %s in %s: %s", meta.get("step"),
                                writer, why)  # fmt: skip
                continue
            entry = Held(int(meta["step"]), int(meta["rank"]), int(meta["world_size"]),
                         bool(meta["replicated"]), buddy, str(slot.meta_path))  # fmt: skip
            found.append(entry)
    return found


def foreign(slot: _shm.Slot, run: str, like: Any) -> str:
    """Why ``slot`` is not a snapshot run ``run`` can resume from ("" when it is). Another run's writer
    directory is removed once its newest snapshot is ``_shm.STALE_SECONDS`` old: no run writes there now."""
    theirs = slot.meta.get("run")
    if theirs != run:
        if time.time() - float(slot.meta.get("time", 0)) > _shm.STALE_SECONDS:
            shutil.rmtree(slot.directory, ignore_errors=True)
            return f"it belongs to run {theirs!r}, this is run {run!r} (stale: removed)"
        return f"it belongs to run {theirs!r}, this is run {run!r}"
    if like is not None:
        why = _layout.fits(slot.meta["skeleton"], like)
        if why:
            return f"its state does not fit this one: {why}"
    return ""


def agree(
    mine: list[Held], checkpointer: Any, world_size: int, replicated: bool
) -> tuple[Plan | None, list[list[Held]]]:
    """The plan every rank follows (None: start afresh), the same on all (call it on every rank): chosen from
    what every rank holds (``mine`` here) and the newest checkpoint any rank sees; and what every rank holds."""
    disk = checkpointer.checkpoints()
    disk_step = disk[-1][0] if disk else None
    if distributed() and world_size > 1:
        gathered = all_gather((mine, disk_step))
        held = [entries for entries, _ in gathered]
        disk_steps = [step for _, step in gathered if step is not None]
        disk_step = max(disk_steps) if disk_steps else None
    else:
        held = [mine]
    plan = choose(held, disk_step, replicated=replicated)
    if plan is not None and plan.note:
        log.warning("%s", plan.note)
    return plan, held


def follow(
    plan: Plan, held: list[list[Held]], rank: int, replicated: bool, checkpointer: Any, map_location: Any
) -> tuple[int, Any, str]:
    """Rank ``rank``'s part of ``plan`` (call it on every rank): the step, the state and where it was read."""
    source = plan.sources[rank]
    if source == DISK:
        latest = checkpointer.load_latest(map_location=map_location)
        if latest is None:
            raise RuntimeError(f"the checkpoint of step {plan.step} in {checkpointer.directory} is gone")
        return latest.step, latest.state, DISK
    state = None
    if source != PEER:
        entry = next(e for e in held[rank] if serves(e, plan.step, plan.shards[rank], replicated))
        state = read_chosen(entry, _shm.read_into_private)
    for fetch in plan.fetches:
        state = transfer(fetch, plan, held[rank], state, rank, replicated)
    return plan.step, state, source


def transfer(fetch: Any, plan: Plan, mine: list[Held], state: Any, rank: int, replicated: bool) -> Any:
    """Rank ``fetch.source`` sends its copy of the shard to each rank of ``fetch.to``, and to no other (the
    header, small, goes to all: every rank takes part in the same collectives)."""
    import torch
    import torch.distributed as dist

    header: list[Any] = [None]
    data = None
    if rank == fetch.source:
        entry = next(e for e in mine if serves(e, plan.step, fetch.shard, replicated))
        skeleton, data = read_chosen(entry, lambda slot: (slot.meta["skeleton"], _shm.read_data(slot)))
        header = [(skeleton, data.numel())]
    dist.broadcast_object_list(header, src=fetch.source)
    skeleton, size = header[0]
    if rank == fetch.source:
        assert data is not None
        for other in fetch.to:
            dist.send(data, dst=other)
    if rank in fetch.to:
        received = torch.empty(size, dtype=torch.uint8)
        dist.recv(received, src=fetch.source)
        storages = _layout.split(
            skeleton,
            size,
            lambda buffer, offset: buffer.copy_(received[offset : offset + buffer.numel()]),
        )
        return _layout.rebuild(skeleton, storages)
    return state


def read_chosen(entry: Held, read: Callable[[_shm.Slot], _T]) -> _T:
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
