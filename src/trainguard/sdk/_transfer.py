"""Live mode's state transfer: a survivor's state, sent to the members that lack it, point to point.

The state is a dict of objects with ``state_dict()`` / ``load_state_dict()`` (a model, an optimizer, a
sampler...). The sender splits their state dicts into a skeleton (everything but the tensors, with a
placeholder for each) and the tensors; the skeleton goes through the store, the tensors in buckets of one
dtype through a gloo group of the senders and the receivers only, staged in the host's memory (gloo's own path
for device tensors, here explicit so that it is the same on every torch). Every member that holds the agreed
state can send: the buckets are dealt among the senders, so that each copies and sends its share only. The
receivers build tensors like the senders' on their own device and load them. Nobody else takes part.

The buckets go several at a time: the group has ``STREAMS`` connections per pair, each with a thread of its own
(gloo's ``devices`` and ``threads`` options), and ``WINDOW_PER_STREAM`` buckets a stream are in flight, so that copying one bucket
between the device and the host overlaps sending the others, and one TCP stream's pace is not the bound. A GPU's
buckets are staged in page-locked host memory (torch's caching host allocator keeps it for the next bucket).
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from trainguard.pod import contract

_Indexed = TypeVar("_Indexed")

#: The most bytes of one bucket (one broadcast).
BUCKET_BYTES = 32 << 20
#: Connections (and gloo threads) per pair of the transfer's group: buckets sent side by side
#: (``TRAINGUARD_LIVE_STREAMS`` overrides it).
STREAMS = 4
#: Buckets in flight at once, per stream: with ``BUCKET_BYTES``, bounds the extra host memory a transfer takes.
WINDOW_PER_STREAM = 2


@dataclass(frozen=True)
class Placeholder:
    """Where a tensor was in a state dict: its index among the tensors, its shape, dtype and device kind."""

    index: int
    shape: tuple[int, ...]
    dtype: str
    on_device: bool


def split(obj: Any, tensors: list[Any]) -> Any:
    """``obj`` with each tensor replaced by a ``Placeholder``; the tensors appended to ``tensors``."""
    import torch

    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return Placeholder(len(tensors) - 1, tuple(obj.shape), str(obj.dtype), obj.device.type != "cpu")
    if isinstance(obj, dict):
        return {key: split(value, tensors) for key, value in obj.items()}
    if isinstance(obj, list):
        return [split(value, tensors) for value in obj]
    if isinstance(obj, tuple):
        return tuple(split(value, tensors) for value in obj)
    return obj


def fill(obj: Any, tensors: list[Any]) -> Any:
    """``split`` undone: each placeholder replaced by its tensor."""
    if isinstance(obj, Placeholder):
        return tensors[obj.index]
    if isinstance(obj, dict):
        return {key: fill(value, tensors) for key, value in obj.items()}
    if isinstance(obj, list):
        return [fill(value, tensors) for value in obj]
    if isinstance(obj, tuple):
        return tuple(fill(value, tensors) for value in obj)
    return obj


def placeholders(obj: Any) -> list[Placeholder]:
    """The placeholders of a skeleton, in the order of their index."""
    return found_in(obj, Placeholder)


def found_in(obj: Any, kind: type[_Indexed]) -> list[_Indexed]:
    """The objects of ``kind`` in a skeleton (nested dicts, lists and tuples), in the order of their ``index``."""
    found: list[_Indexed] = []

    def walk(value: Any) -> None:
        if isinstance(value, kind):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(obj)
    return sorted(found, key=lambda item: item.index)  # type: ignore[attr-defined]


def buckets(sizes: list[tuple[int, str, int]], limit: int | None = None) -> list[list[int]]:
    """The tensors' indices grouped into buckets: one kind each, at most ``limit`` bytes unless one tensor
    alone is larger (default ``BUCKET_BYTES``). ``sizes``: (index, kind, bytes) in the order of the tensors."""
    limit = BUCKET_BYTES if limit is None else limit
    open_: dict[str, tuple[list[int], int]] = {}
    done: list[list[int]] = []
    for index, kind, nbytes in sizes:
        members, total = open_.get(kind, ([], 0))
        if members and total + nbytes > limit:
            done.append(members)
            members, total = [], 0
        members.append(index)
        open_[kind] = (members, total + nbytes)
    done.extend(members for members, _ in open_.values() if members)
    return sorted(done, key=lambda bucket: bucket[0])


def skeleton_of(state: dict[str, Any]) -> tuple[bytes, list[Any]]:
    """The sender's side: the pickled skeleton of every object's state dict, and the tensors."""
    tensors: list[Any] = []
    skeleton = {name: split(obj.state_dict(), tensors) for name, obj in state.items()}
    return pickle.dumps(skeleton), tensors


def streams() -> int:
    """The transfer's streams: ``TRAINGUARD_LIVE_STREAMS`` where set (1 to 64), else ``STREAMS``."""
    raw = os.environ.get(contract.ENV_LIVE_STREAMS, "").strip()
    if raw.isdigit() and 1 <= int(raw) <= 64:
        return int(raw)
    return STREAMS


def group_options(timeout: timedelta, count: int | None = None) -> Any:
    """Options of a gloo group with ``count`` (default ``streams()``) connections per pair, each served by its
    own thread."""
    import torch.distributed as dist

    count = count or streams()

    options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
    device = dist.ProcessGroupGloo.create_default_device()
    options._devices = [device] * count
    options._threads = count
    options._timeout = timeout
    return options


def send(group: Any, tensors: list[Any], senders: int = 1, me: int = 0) -> int:
    """The sender's side, as sender ``me`` of ``senders`` (ranks 0..senders-1 of ``group``, a gloo backend,
    each holding the same state): bucket ``i`` goes from the sender ``deal`` gives it to every receiver (the
    ranks after the senders), point to point, tagged ``i``. Returns the bytes this sender sent to one
    receiver."""
    sizes = [
        (i, _kind(str(t.dtype), t.device.type != "cpu"), t.numel() * t.element_size())
        for i, t in enumerate(tensors)
    ]
    receivers = range(senders, group.size())
    planned = buckets(sizes)
    dealt = deal([sum(sizes[k][2] for k in bucket) for bucket in planned], senders)
    mine = [(i, bucket) for i, bucket in enumerate(planned) if dealt[i] == me]

    def start(tag: int) -> Any:
        return lambda flat: [group.send([flat], receiver, tag) for receiver in receivers]

    sent = 0
    for flat in _in_flight((_flat([tensors[k] for k in bucket]), start(i)) for i, bucket in mine):
        sent += flat.numel() * flat.element_size()
    return sent


def receive(group: Any, body: bytes, device: Any, senders: int = 1) -> tuple[dict[str, Any], int]:
    """The receiver's side: the state dicts rebuilt from the skeleton and the buckets of the ``senders``
    (``send``), device tensors placed on ``device``. Returns them and the bytes received."""
    import torch

    skeleton = pickle.loads(body)
    slots = placeholders(skeleton)
    tensors: list[Any] = [None] * len(slots)
    planned = buckets([(p.index, _kind(p.dtype, p.on_device), _nbytes(p)) for p in slots])
    cuda = torch.device(device).type == "cuda"

    def empty(bucket: list[int]) -> Any:
        count = sum(_numel(slots[i]) for i in bucket)
        pinned = cuda and slots[bucket[0]].on_device
        return torch.empty(count, dtype=_dtype(slots[bucket[0]].dtype), pin_memory=pinned)

    dealt = deal([_nbytes_of(slots, bucket) for bucket in planned], senders)

    def start(tag: int) -> Any:
        return lambda flat: [group.recv([flat], dealt[tag], tag)]

    def place(bucket: list[int], flat: Any) -> None:
        if slots[bucket[0]].on_device:  # one copy to the device, then each tensor its own storage there
            flat = flat.to(device, non_blocking=flat.is_pinned())  # ordered before the clones on its stream
        at = 0
        for i in bucket:
            n = _numel(slots[i])
            tensors[i] = flat[at : at + n].view(slots[i].shape).clone()
            at += n

    received = 0
    filled = _in_flight((empty(bucket), start(i)) for i, bucket in enumerate(planned))
    for bucket, flat in zip(planned, filled):  # noqa: B905 (the bundle runs on python 3.8)
        place(bucket, flat)
        received += flat.numel() * flat.element_size()
    return fill(skeleton, tensors), received


def deal(sizes: list[int], senders: int) -> list[int]:
    """Which sender sends each bucket (``sizes``: their bytes, in order): each in turn to the sender with the
    fewest bytes so far (the first of them on a tie), so that the shares are about even. The same on every
    member: it depends on the sizes only."""
    loads = [0] * senders
    dealt = []
    for size in sizes:
        sender = loads.index(min(loads))
        dealt.append(sender)
        loads[sender] += size
    return dealt


def _nbytes_of(slots: list[Placeholder], bucket: list[int]) -> int:
    return sum(_nbytes(slots[i]) for i in bucket)


def _in_flight(operations: Iterator[tuple[Any, Callable[[Any], list[Any]]]]) -> Iterator[Any]:
    """Starts each operation (a bucket, and what starts its sends or receive), ``WINDOW_PER_STREAM`` a stream
    at a time; yields each bucket once its operation is done, in order. On an error every operation still in
    flight is waited for (it fails at once once the group's connections are shut down) before the error goes
    on: none is left running behind the caller."""
    pending: deque[tuple[list[Any], Any]] = deque()
    window = WINDOW_PER_STREAM * streams()
    try:
        for flat, begin in operations:
            pending.append((begin(flat), flat))
            if len(pending) >= window:
                works, done = pending.popleft()
                for work in works:
                    work.wait()
                yield done
        while pending:
            works, done = pending.popleft()
            for work in works:
                work.wait()
            yield done
    except BaseException:
        for works, _ in pending:
            for work in works:
                with contextlib.suppress(Exception):
                    work.wait()
        raise


def load(state: dict[str, Any], dicts: dict[str, Any]) -> None:
    for name, obj in state.items():
        obj.load_state_dict(dicts[name])


def _flat(tensors: list[Any]) -> Any:
    """One bucket's tensors as one flat tensor in the host's memory (joined on their device, copied once)."""
    import torch

    if len({t.device for t in tensors}) > 1:
        return torch.cat([t.detach().reshape(-1).cpu() for t in tensors])
    joined = torch.cat([t.detach().reshape(-1) for t in tensors])
    if joined.device.type != "cuda":
        return joined.cpu()
    # Page-locked memory: the copy from the device runs at the bus's pace, not through a bounce buffer.
    host = torch.empty(joined.numel(), dtype=joined.dtype, pin_memory=True)
    host.copy_(joined)
    return host


def _kind(dtype: str, on_device: bool) -> str:
    """What a bucket holds only one of: a dtype, on a device or in the host's memory."""
    return f"{dtype}/{'device' if on_device else 'host'}"


def _numel(p: Placeholder) -> int:
    n = 1
    for d in p.shape:
        n *= d
    return n


def _dtype(name: str) -> Any:
    import torch

    return getattr(torch, name.removeprefix("torch."))


def _nbytes(p: Placeholder) -> int:
    import torch

    return _numel(p) * torch.empty(0, dtype=_dtype(p.dtype)).element_size()
