"""Which step every rank resumes from, decided from what each rank can see: pure, no torch, no I/O.

Every rank gathers the snapshots it can reach (in its node's memory: its own copies and the copies peers
replicated to it) and the newest checkpoint on disk; all ranks gather everyone's list and run ``choose`` on the
same input, so they all reach the same plan without another round of messages, and no rank mixes steps.

A snapshot is either *replicated* (every rank holds the same state, as under DDP: any copy of a step serves
every rank) or a *shard* (rank ``r`` of a world of ``W`` holds its own part: a step is usable only when all ``W``
shards of it can be reached, and only by a world of ``W`` ranks; resharding is out of scope here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

#: Where a rank gets the state of the chosen step from.
MEMORY = "memory"  # its own copy, in its node's shared memory
BUDDY = "buddy"  # a copy a peer replicated into its node's shared memory
PEER = "peer"  # another rank sends it (that rank's node has it, this rank's does not)
DISK = "disk"  # the newest checkpoint file


@dataclass(frozen=True)
class Held:
    """One snapshot that one rank can read from its node's memory."""

    step: int
    shard: int  # the rank that wrote it (its shard, for sharded state)
    world_size: int  # the world it was written in
    replicated: bool
    buddy: bool  # a peer's replica, not the writer's own copy
    path: str = ""  # where the reading rank finds it (not compared)


@dataclass(frozen=True)
class Fetch:
    """Rank ``source`` sends shard ``shard`` of the chosen step to the ranks ``to`` that cannot reach it."""

    shard: int
    source: int
    to: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    step: int
    #: Per rank: where it reads the chosen step from (MEMORY, BUDDY, PEER or DISK).
    sources: tuple[str, ...]
    #: Per rank: the shard it loads (its own rank for sharded state; 0, any copy, for a replicated one).
    shards: tuple[int, ...]
    fetches: tuple[Fetch, ...] = field(default=())
    #: Why newer memory snapshots were passed over (e.g. a sharded state written by a world of another size).
    note: str = ""


class ReshardError(RuntimeError):
    """Sharded state saved by a world of one size cannot be loaded by a world of another here."""


def choose(held: Sequence[Sequence[Held]], disk_step: int | None, *, replicated: bool) -> Plan | None:
    """The plan for a world of ``len(held)`` ranks; ``held[r]``: what rank ``r`` reads from its node's memory.
    ``None`` when there is nothing to resume from (a fresh start)."""
    world = len(held)
    best = _best_replicated(held) if replicated else _best_sharded(held, world)
    note = ""
    if not replicated and best is None:
        worlds = sorted({h.world_size for rank in held for h in rank if not h.replicated} - {world})
        if worlds:
            note = (
                f"memory snapshots of sharded state were written by a world of {worlds[-1]} ranks; this world "
                f"has {world}: they cannot be resharded here, so the newest checkpoint on disk is used"
            )
    if best is None or (disk_step is not None and disk_step > best):
        if disk_step is None:
            if note:
                raise ReshardError(note + ", and there is none")
            return None
        return Plan(
            disk_step, (DISK,) * world, tuple(0 if replicated else r for r in range(world)), note=note
        )
    step = best
    sources: list[str] = []
    shards: list[int] = []
    missing: dict[int, list[int]] = {}
    for rank, mine in enumerate(held):
        shard = 0 if replicated else rank
        found = [h for h in mine if serves(h, step, shard, replicated)]
        shards.append(shard)
        if any(not h.buddy for h in found):
            sources.append(MEMORY)
        elif found:
            sources.append(BUDDY)
        else:
            sources.append(PEER)
            missing.setdefault(shard, []).append(rank)
    fetches = []
    for shard, ranks in sorted(missing.items()):
        holder = min(
            rank for rank, mine in enumerate(held) if any(serves(h, step, shard, replicated) for h in mine)
        )
        fetches.append(Fetch(shard, holder, tuple(ranks)))
    return Plan(step, tuple(sources), tuple(shards), tuple(fetches))


def serves(held: Held, step: int, shard: int, replicated: bool) -> bool:
    """Whether ``held`` is what a rank needing ``shard`` of ``step`` loads (any copy, for replicated state)."""
    return held.step == step and (
        held.replicated if replicated else (not held.replicated and held.shard == shard)
    )


def _best_replicated(held: Sequence[Sequence[Held]]) -> int | None:
    steps = [h.step for rank in held for h in rank if h.replicated]
    return max(steps) if steps else None


def _best_sharded(held: Sequence[Sequence[Held]], world: int) -> int | None:
    """The newest step of which every shard 0..world-1, written by a world of ``world``, can be reached."""
    reachable: dict[int, set[int]] = {}
    for rank in held:
        for h in rank:
            if not h.replicated and h.world_size == world:
                reachable.setdefault(h.step, set()).add(h.shard)
    complete = [step for step, shards in reachable.items() if shards >= set(range(world))]
    return max(complete) if complete else None
