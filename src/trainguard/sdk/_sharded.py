"""Live mode's sharded states (FSDP2: ``torch.distributed.fsdp.fully_shard``, whose parameters and optimizer state
are DTensors sharded on dim 0): nothing whole to send, so each member keeps its own shard and a copy of its wards'
(``trainguard.sdk._pairing``), and each round shards the state anew from what the members hold
(``trainguard.sdk._reshard`` decides, this module moves the bytes over the round's gloo group).

- ``commit`` (at each step's end, and once a round is formed): the member's state packed (its shards' bytes in
  one buffer, the rest of its state dicts kept as a skeleton), sent to its buddy while its wards' arrive, then a
  one-element all-reduce: a step whose copies every member finished is kept, and the older copies dropped. A
  member that fails before it keeps both, so that the next round finds a whole state at one step or the other.
- ``settle`` (each round): the members' inventories gathered; the newest step held whole chosen; the round's
  objects built anew by the script's ``build(mesh)`` over the round's mesh; each member's rows of each sharded
  tensor sent to it point to point, from itself where it holds them, else from the old shard's owner, else its
  buddy; the state dicts filled and loaded. A state held in part only falls back to ``restore=``, said on stderr.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainguard.pod.contract import Member
from trainguard.sdk import _pairing, _reshard, _transfer
from trainguard.sdk._reshard import Held
from trainguard.sdk._roundstore import LiveError


@dataclass(frozen=True)
class Leaf:
    """Where a DTensor sharded on dim 0 was in a state dict: its index among the sharded tensors, its whole
    shape and stride, its dtype."""

    index: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape[1:]) * _itemsize(self.dtype)


@dataclass
class Copy:
    """A shard's copy at one step: its bytes (the sharded tensors' rows, one after the other), and for the
    member's own the skeleton of its state dicts (every part but the shards, other tensors cloned)."""

    data: Any
    skeleton: Any | None


def say(text: str) -> None:
    print(f"trainguard live: {text}", file=sys.stderr, flush=True)


def sharded_objects(state: dict[str, Any]) -> list[str]:
    """The names of ``state``'s modules whose parameters are DTensors (sharded by FSDP2)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch without DTensors shards nothing
        return []
    import torch

    return [
        name
        for name, obj in state.items()
        if isinstance(obj, torch.nn.Module) and any(isinstance(p, DTensor) for p in obj.parameters())
    ]


def check(state: dict[str, Any], build: Callable[[Any], dict[str, Any]] | None, backend: str) -> None:
    """A sharded state is built by ``build`` for each round, over gloo; one passed in ``state`` cannot be."""
    sharded = sharded_objects(state)
    if sharded and build is None:
        raise ValueError(
            f"Live(state): state[{sharded[0]!r}] is sharded (FSDP2: its parameters are DTensors), and each round "
            "shards it over a group of its own: pass Live(build=fn) instead, fn(mesh) returning the model sharded "
            "over the mesh and its optimizer"
        )
    if build is not None and backend != "gloo":
        raise ValueError(
            f"Live(build=..., backend={backend!r}): a sharded state is kept over gloo only (for now)"
        )


class Sharded:
    """A live member's sharded state: its copies (``held``, by (round, world, index, step)), the round's pairing,
    and what the copies cost: ``copies`` made, ``copy_seconds`` in all (of which ``pack_seconds`` packing its own,
    the rest the exchange with its buddy and wards and the all-reduce after it), ``copy_bytes`` sent."""

    def __init__(self, build: Callable[[Any], dict[str, Any]]) -> None:
        self.build = build
        self.held: dict[tuple[int, int, int, int], Copy] = {}
        self.round = self.world = self.rank = 0
        self.buddy: int | None = None
        self.wards: list[int] = []
        self.mesh: Any = None
        self.copies = 0
        self.copy_seconds = 0.0
        self.pack_seconds = 0.0
        self.copy_bytes = 0
        self._warned: str | None = None

    def inventory(self) -> list[Held]:
        return [
            Held(r, w, i, s, copy.skeleton is not None) for (r, w, i, s), copy in sorted(self.held.items())
        ]

    def held_step(self) -> int:
        """The newest step of the member's own copies; -1 when it holds none."""
        return max((held.step for held in self.inventory() if held.own), default=-1)

    def warm_up(self, then: Callable[[], Any] | None) -> Callable[[], Any]:
        """A newcomer's warm-up: ``build`` once over a mesh of this process alone, let go (a process's first
        ``fully_shard`` costs about a second, its later ones milliseconds), then the script's ``warmup``."""

        def warm() -> None:
            from torch.distributed.device_mesh import init_device_mesh

            _built(self.build, init_device_mesh("cpu", (1,)))
            if then is not None:
                then()

        return warm

    # -- each round --------------------------------------------------------------------------------------------

    def settle(
        self,
        round_: int,
        members: tuple[str, ...],
        rank: int,
        state: dict[str, Any],
        restore: Callable[[], tuple[int, str] | None] | None,
        current: int,
        regroup: Callable[[int], None],
    ) -> tuple[str, int, int, int]:
        """Puts the round's sharded state in place (call it on every member of the round, once its default group
        is made; ``current``: the member's step; ``regroup(rank)``: the round's group made anew, this member at
        ``rank``): (where it came from, bytes received, the step it is at, the member's rank)."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        world = len(members)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, self.inventory())
        inventories: list[list[Held]] = gathered
        choice = _reshard.choose(inventories)
        order = _reshard.slots(inventories, choice)
        if order != list(range(world)):  # each member in the slot of the shard it holds
            rank = order[rank]
            regroup(rank)
            inventories = [inventories[order.index(slot)] for slot in range(world)]
            members = tuple(members[order.index(slot)] for slot in range(world))
            choice = _reshard.choose(inventories)
        self._pair(round_, world, rank, [_pod(member) for member in members])
        self.mesh = init_device_mesh("cpu", (world,))
        state.update(_built(self.build, self.mesh))
        if choice is not None:
            origin, moved = self._reshard(choice, inventories, state)
            step: int | None = choice.step
        else:
            origin, moved, step = self._fall_back(round_, inventories, restore)
        step = current if step is None else step
        self.commit(state, step)
        return origin, moved, step, rank

    def _pair(self, round_: int, world: int, rank: int, nodes: list[str]) -> None:
        self.round, self.world, self.rank = round_, world, rank
        self.buddy = _pairing.buddy_of(rank, nodes)
        self.wards = _pairing.wards_of(rank, nodes)
        why = _pairing.no_buddy_elsewhere(nodes)
        if why is not None and why != self._warned and rank == 0:
            say(f"round {round_}: the sharded state's shards have no buddy on another pod ({why}); where a shard "
                "and its copy are both lost, the state falls back to Live(restore=...)")  # fmt: skip
        self._warned = why

    def _fall_back(
        self, round_: int, inventories: list[list[Held]], restore: Callable[[], tuple[int, str] | None] | None
    ) -> tuple[str, int, int | None]:
        """No state held whole: nobody holds one (the job's start: each member's own built state, or restored),
        or some shards lost with their buddies (restored, or ``LiveError``)."""
        short = _reshard.shortfall(inventories)
        if short is not None:
            lost = (f"round {round_}: the sharded state cannot be formed from memory: the shards of ranks "
                    f"{list(short.missing)} of round {short.round} (a world of {short.world}) at step {short.step} "
                    "have no holder (each lost with its buddy)")  # fmt: skip
            if restore is None:
                raise LiveError(
                    f"live mode: {lost}, and Live has no restore= to load a snapshot or checkpoint"
                )
            say(f"{lost}; falling back to Live(restore=...)")
        restored = restore() if restore is not None else None
        if restored is None:
            if short is not None:
                raise LiveError(f"live mode: round {round_}: Live(restore=...) found nothing to load")
            return "fresh", 0, None
        step, origin = restored
        if short is not None:
            say(
                f"round {round_}: the sharded state restored by Live(restore=...) from {origin} at step {step}"
            )
        return origin, 0, step

    def _reshard(
        self, choice: _reshard.Choice, inventories: list[list[Held]], state: dict[str, Any]
    ) -> tuple[str, int]:
        import torch
        import torch.distributed as dist

        key = (choice.round, choice.world, choice.step)
        own = next(
            (
                copy
                for (r, w, _, s), copy in self.held.items()
                if copy.skeleton is not None and (r, w, s) == key
            ),
            None,
        )
        if any(not any(h.own and h.sharding == key for h in inventory) for inventory in inventories):
            box = [own.skeleton if self.rank == choice.lead and own is not None else None]
            dist.broadcast_object_list(box, src=choice.lead)
            skeleton = own.skeleton if own is not None else box[0]
        else:
            assert own is not None
            skeleton = own.skeleton
        leaves = _leaves(skeleton)
        plan = _reshard.pieces([leaf.shape[0] for leaf in leaves], choice, self.world)

        def held_bytes(piece: _reshard.Piece) -> Any:
            copy = self.held[(choice.round, choice.world, piece.old, choice.step)]
            offset = _offsets(leaves, choice.world, piece.old)[piece.leaf]
            first = _reshard.rows(leaves[piece.leaf].shape[0], choice.world, piece.old)[0]
            row = leaves[piece.leaf].row_bytes
            return copy.data[offset + (piece.start - first) * row : offset + (piece.stop - first) * row]

        outgoing: dict[int, list[Any]] = {}
        incoming: dict[int, int] = {}
        for piece in plan:
            span = (piece.stop - piece.start) * leaves[piece.leaf].row_bytes
            if piece.source == self.rank and piece.target != self.rank:
                outgoing.setdefault(piece.target, []).append(held_bytes(piece))
            elif piece.target == self.rank and piece.source != self.rank:
                incoming[piece.source] = incoming.get(piece.source, 0) + span
        received = {source: torch.empty(size, dtype=torch.uint8) for source, size in incoming.items()}
        _exchange({target: torch.cat(parts) for target, parts in outgoing.items()}, received)
        news = [torch.empty(_span(leaf, self.world, self.rank), dtype=torch.uint8) for leaf in leaves]
        at = dict.fromkeys(received, 0)
        for piece in plan:
            if piece.target != self.rank:
                continue
            leaf = leaves[piece.leaf]
            start = _reshard.rows(leaf.shape[0], self.world, self.rank)[0]
            row = leaf.row_bytes
            span = (piece.stop - piece.start) * row
            if piece.source == self.rank:
                part = held_bytes(piece)
            else:
                part = received[piece.source][at[piece.source] : at[piece.source] + span]
                at[piece.source] += span
            news[piece.leaf][(piece.start - start) * row : (piece.stop - start) * row] = part
        _load(state, _fill(skeleton, news, leaves, self.mesh))
        moved = sum(buffer.numel() for buffer in received.values())
        return ("peer" if moved else "live"), moved

    # -- each step ---------------------------------------------------------------------------------------------

    def commit(self, state: dict[str, Any], step: int) -> None:
        """The member's state at ``step`` kept, sent to its buddy and its wards' received; once every member of the
        round has (a one-element all-reduce), the older copies are dropped. A fault raises (RuntimeError)."""
        import torch
        import torch.distributed as dist

        started = time.perf_counter()
        skeleton, data, leaves = _pack(state, self.world, self.rank)
        self.pack_seconds += time.perf_counter() - started
        self.held[(self.round, self.world, self.rank, step)] = Copy(data, skeleton)
        received = {
            w: torch.empty(_chunk_bytes(leaves, self.world, w), dtype=torch.uint8) for w in self.wards
        }
        _exchange({self.buddy: data} if self.buddy is not None else {}, received)
        for ward, buffer in received.items():
            self.held[(self.round, self.world, ward, step)] = Copy(buffer, None)
        flag = torch.ones(1)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        if float(flag.item()) < 1.0:
            raise RuntimeError("live: a member did not keep its shard's copy")
        self.held = {k: c for k, c in self.held.items() if (k[0], k[3]) == (self.round, step)}
        self.copies += 1
        self.copy_seconds += time.perf_counter() - started
        self.copy_bytes += int(data.numel()) if self.buddy is not None else 0


def _exchange(sends: dict[int, Any], receives: dict[int, Any]) -> None:
    """Each of ``sends`` (rank -> bytes) sent, each of ``receives`` (rank -> a buffer) filled, point to point over
    the round's group, all at once; empty ones are skipped at both ends (each end knows their sizes)."""
    import torch.distributed as dist

    works = [dist.isend(data, rank) for rank, data in sends.items() if data.numel()]
    works += [dist.irecv(buffer, rank) for rank, buffer in receives.items() if buffer.numel()]
    for work in works:
        if work is not None:
            work.wait()


def _pod(member: str) -> str:
    """The pod a member runs in (its buddy is chosen on another): its id's pod, else the id itself."""
    try:
        return Member.parse(member).pod
    except ValueError:
        return member


def _built(build: Callable[[Any], dict[str, Any]], mesh: Any) -> dict[str, Any]:
    objects = build(mesh)
    if not isinstance(objects, dict) or not objects:
        raise TypeError(f"Live(build=...) returned {type(objects).__name__}; return a dict of the objects built "
                        "over the mesh, e.g. {'model': model, 'optimizer': optimizer}")  # fmt: skip
    for name, obj in objects.items():
        if not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
            raise TypeError(f"Live(build=...)[{name!r}] is a {type(obj).__name__}, which has no state_dict() "
                            "and load_state_dict()")  # fmt: skip
    return objects


def _pack(state: dict[str, Any], world: int, rank: int) -> tuple[Any, Any, list[Leaf]]:
    """The skeleton of ``state``'s state dicts, its shards' bytes (one buffer in the host's memory), its leaves."""
    import torch

    locals_: list[Any] = []
    skeleton = {name: _split(obj.state_dict(), locals_, name) for name, obj in state.items()}
    leaves = _leaves(skeleton)
    assert len(leaves) == len(locals_)  # one leaf per local shard, as _split made them
    for leaf, local in zip(leaves, locals_):  # noqa: B905 (the bundle runs on Python 3.8: no strict=)
        first, last = _reshard.rows(leaf.shape[0], world, rank)
        if local.shape[0] != last - first:
            raise ValueError(f"Live(build=...): a sharded tensor of {leaf.shape[0]} rows holds {local.shape[0]} "
                             f"on rank {rank} of {world}, not FSDP2's {last - first}: shard on dim 0 over "
                             "Live's mesh")  # fmt: skip
    flat = [local.detach().contiguous().reshape(-1).view(torch.uint8) for local in locals_]
    data = torch.cat(flat).cpu() if flat else torch.empty(0, dtype=torch.uint8)
    return skeleton, data, leaves


def _split(obj: Any, locals_: list[Any], where: str) -> Any:
    import torch
    from torch.distributed.tensor import DTensor, Shard

    if isinstance(obj, DTensor):
        if obj.device_mesh.ndim != 1 or tuple(obj.placements) != (Shard(0),):
            raise ValueError(f"Live(build=...): {where} is a DTensor placed {tuple(obj.placements)} on a mesh of "
                             f"{obj.device_mesh.ndim} dimensions; live mode keeps FSDP2's (Shard(0),) on Live's mesh")  # fmt: skip
        locals_.append(obj.to_local())
        return Leaf(len(locals_) - 1, tuple(obj.shape), tuple(obj.stride()), str(obj.dtype))
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {key: _split(value, locals_, f"{where}.{key}") for key, value in obj.items()}
    if isinstance(obj, list):
        return [_split(value, locals_, f"{where}[{i}]") for i, value in enumerate(obj)]
    if isinstance(obj, tuple):
        return tuple(_split(value, locals_, f"{where}[{i}]") for i, value in enumerate(obj))
    return obj


def _leaves(skeleton: Any) -> list[Leaf]:
    return _transfer.found_in(skeleton, Leaf)


def _fill(skeleton: Any, news: list[Any], leaves: list[Leaf], mesh: Any) -> Any:
    """The skeleton's state dicts, each leaf a DTensor over ``mesh`` of this rank's new rows (``news``: bytes)."""
    import torch
    from torch.distributed.tensor import DTensor, Shard

    def fill(value: Any) -> Any:
        if isinstance(value, Leaf):
            local = news[value.index].view(_dtype(value.dtype)).view(-1, *value.shape[1:])
            return DTensor.from_local(
                local, mesh, [Shard(0)], run_check=False, shape=torch.Size(value.shape), stride=value.stride
            )
        if isinstance(value, torch.Tensor):
            return value.clone()  # the copy stays as it is: the objects change theirs in place
        if isinstance(value, dict):
            return {key: fill(item) for key, item in value.items()}
        if isinstance(value, list):
            return [fill(item) for item in value]
        if isinstance(value, tuple):
            return tuple(fill(item) for item in value)
        return value

    return fill(skeleton)


def _load(state: dict[str, Any], dicts: dict[str, Any]) -> None:
    for name, obj in state.items():
        if name in dicts:
            obj.load_state_dict(dicts[name])


def _offsets(leaves: list[Leaf], world: int, index: int) -> list[int]:
    """Where each leaf's rows start in the bytes of rank ``index``'s shard."""
    offsets, at = [], 0
    for leaf in leaves:
        offsets.append(at)
        at += _span(leaf, world, index)
    return offsets


def _span(leaf: Leaf, world: int, index: int) -> int:
    first, last = _reshard.rows(leaf.shape[0], world, index)
    return (last - first) * leaf.row_bytes


def _chunk_bytes(leaves: list[Leaf], world: int, index: int) -> int:
    return sum(_span(leaf, world, index) for leaf in leaves)


def _dtype(name: str) -> Any:
    import torch

    return getattr(torch, name.removeprefix("torch."))


def _itemsize(name: str) -> int:
    import torch

    return torch.empty(0, dtype=_dtype(name)).element_size()
