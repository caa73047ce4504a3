"""Live mode's sharded states, decided: which copies of the shards the members hold, the newest step whose every
shard has a holder, and who sends which rows of each sharded tensor to whom to shard it over the new round. Pure:
the members' inventories in, a decision out (``trainguard.sdk._sharded`` gathers them and moves the bytes).

A sharded tensor of ``n`` rows over a world of ``w`` is cut as FSDP2 cuts it (``torch.chunk`` on dim 0, the ranks
past the last chunk holding none): rank ``i`` holds rows ``[i*c, (i+1)*c)`` of ``c = ceil(n/w)``, clipped to ``n``.
Each member keeps its own shard as of the last step it applied (``own``) and its wards' (the ranks whose buddy it
is, ``trainguard.sdk._pairing``), each copy named by ``Held``: the round whose sharding it is, that round's world,
the rank (index) whose shard it is, and the step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Held:
    """A copy of the shard of rank ``index`` of round ``round`` (a world of ``world``) at ``step``: the member's
    own (``own``) or a ward's."""

    round: int
    world: int
    index: int
    step: int
    own: bool

    @property
    def sharding(self) -> tuple[int, int, int]:
        """The state it is a part of: (round, world, step)."""
        return (self.round, self.world, self.step)


@dataclass(frozen=True)
class Choice:
    """The state the members hold whole: its sharding (round, world, step), each rank's holders (members by
    their position in the new round; the owner first), and ``lead``, the first member holding its own shard."""

    round: int
    world: int
    step: int
    holders: tuple[tuple[int, ...], ...]
    lead: int


@dataclass(frozen=True)
class Shortfall:
    """The newest state some member holds a part of but that no set of members holds whole: the ranks (indices
    of round ``round``) whose shard has no holder."""

    round: int
    world: int
    step: int
    missing: tuple[int, ...]


@dataclass(frozen=True)
class Piece:
    """Rows ``[start, stop)`` of sharded tensor ``leaf``, from the copy of old rank ``old``'s shard that member
    ``source`` holds, to member ``target`` (the new round's rank ``target``)."""

    leaf: int
    source: int
    target: int
    old: int
    start: int
    stop: int


def rows(n: int, world: int, index: int) -> tuple[int, int]:
    """The rows ``[start, stop)`` of a tensor of ``n`` rows that rank ``index`` of ``world`` holds."""
    chunk = -(-n // world)
    return min(n, index * chunk), min(n, (index + 1) * chunk)


def _by_sharding(
    inventories: Sequence[Iterable[Held]],
) -> dict[tuple[int, int, int], dict[int, list[tuple[bool, int]]]]:
    found: dict[tuple[int, int, int], dict[int, list[tuple[bool, int]]]] = {}
    for member, inventory in enumerate(inventories):
        for held in inventory:
            if 0 <= held.index < held.world:
                found.setdefault(held.sharding, {}).setdefault(held.index, []).append((not held.own, member))
    return found


def choose(inventories: Sequence[Iterable[Held]]) -> Choice | None:
    """The newest step (then the newest round) whose every shard some member holds, with at least one member
    holding its own shard of it (whose skeleton, the state's other parts, it keeps); None when there is none.
    ``inventories``: each member's copies, in the new round's rank order."""
    whole = []
    for (round_, world, step), indices in _by_sharding(inventories).items():
        if set(indices) != set(range(world)):
            continue
        owners = sorted(member for copies in indices.values() for not_own, member in copies if not not_own)
        if owners:
            holders = tuple(tuple(member for _, member in sorted(indices[i])) for i in range(world))
            whole.append(Choice(round_, world, step, holders, owners[0]))
    return max(whole, key=lambda c: (c.step, c.round), default=None)


def shortfall(inventories: Sequence[Iterable[Held]]) -> Shortfall | None:
    """What stops the newest state held in part from being whole (for the warning of a fall-back); None when
    nobody holds anything."""
    found = _by_sharding(inventories)
    if not found:
        return None
    round_, world, step = max(found, key=lambda key: (key[2], key[0]))
    missing = tuple(i for i in range(world) if i not in found[(round_, world, step)])
    return Shortfall(round_, world, step, missing)


def slots(inventories: Sequence[Iterable[Held]], choice: Choice | None) -> list[int]:
    """Each member's slot in the round (by its position in the round's order): its rank in the group the state
    is sharded over. A member that owns the shard of rank ``i`` of the state chosen keeps ``i`` where the round
    has it; the others (newcomers, owners of ranks past the round's world) take the free slots in order. So a
    lost rank's replacement takes its place, and its shard alone moves (from the buddy), the others' stay."""
    world = len(inventories)
    kept: list[int | None] = [None] * world
    if choice is not None:
        key = (choice.round, choice.world, choice.step)
        for member, inventory in enumerate(inventories):
            owned = sorted(h.index for h in inventory if h.own and h.sharding == key)
            if owned and owned[0] < world and owned[0] not in kept:
                kept[member] = owned[0]
    free = iter(slot for slot in range(world) if slot not in kept)
    return [slot if slot is not None else next(free) for slot in kept]


def pieces(lengths: Sequence[int], choice: Choice, world: int) -> list[Piece]:
    """How each of the new round's ``world`` members gets its rows of each sharded tensor (``lengths``: their
    rows, in the skeleton's order): the rows it holds itself come from itself, the others from the first holder
    of the old shard (its owner where it lives, else a buddy). In the order of the tensors, then the targets,
    then the rows: both ends of each pair of members derive the same list."""
    planned = []
    for leaf, n in enumerate(lengths):
        for target in range(world):
            start, stop = rows(n, world, target)
            for old in range(choice.world):
                old_start, old_stop = rows(n, choice.world, old)
                low, high = max(start, old_start), min(stop, old_stop)
                if low >= high:
                    continue
                holders = choice.holders[old]
                source = target if target in holders else holders[0]
                planned.append(Piece(leaf, source, target, old, low, high))
    return planned
