"""Live mode's state transfer: a survivor's state, sent to the members that lack it, point to point.

The state is a dict of objects with ``state_dict()`` / ``load_state_dict()`` (a model, an optimizer, a
sampler...). The sender splits their state dicts into a skeleton (everything but the tensors, with a
placeholder for each) and the tensors; the skeleton goes through the store, the tensors in buckets of one
dtype through a gloo group of the sender and the receivers only, staged in the host's memory (gloo's own path
for device tensors, here explicit so that it is the same on every torch). The receivers build tensors like
the sender's on their own device and load them. Nobody else takes part.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

#: The most bytes of one bucket (one broadcast): bounds the extra memory a transfer takes on each side.
BUCKET_BYTES = 128 << 20


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
    found: list[Placeholder] = []

    def walk(value: Any) -> None:
        if isinstance(value, Placeholder):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(obj)
    return sorted(found, key=lambda p: p.index)


def buckets(sizes: list[tuple[int, str, int]], limit: int = BUCKET_BYTES) -> list[list[int]]:
    """The tensors' indices grouped into buckets: one dtype each, at most ``limit`` bytes unless one tensor
    alone is larger. ``sizes``: (index, dtype, bytes) in the order of the tensors."""
    open_: dict[str, tuple[list[int], int]] = {}
    done: list[list[int]] = []
    for index, dtype, nbytes in sizes:
        members, total = open_.get(dtype, ([], 0))
        if members and total + nbytes > limit:
            done.append(members)
            members, total = [], 0
        members.append(index)
        open_[dtype] = (members, total + nbytes)
    done.extend(members for members, _ in open_.values() if members)
    return sorted(done, key=lambda bucket: bucket[0])


def skeleton_of(state: dict[str, Any]) -> tuple[bytes, list[Any]]:
    """The sender's side: the pickled skeleton of every object's state dict, and the tensors."""
    tensors: list[Any] = []
    skeleton = {name: split(obj.state_dict(), tensors) for name, obj in state.items()}
    return pickle.dumps(skeleton), tensors


def send(group: Any, tensors: list[Any]) -> int:
    """Broadcasts ``tensors`` from rank 0 of ``group`` (a gloo backend). Returns the bytes sent."""
    sent = 0
    for bucket in buckets([(i, str(t.dtype), t.numel() * t.element_size()) for i, t in enumerate(tensors)]):
        flat = _flat([tensors[i] for i in bucket])
        _broadcast(group, flat)
        sent += flat.numel() * flat.element_size()
    return sent


def receive(group: Any, body: bytes, device: Any) -> tuple[dict[str, Any], int]:
    """The receiver's side: the state dicts rebuilt from the skeleton and the tensors broadcast by rank 0,
    device tensors placed on ``device``. Returns them and the bytes received."""
    import torch

    skeleton = pickle.loads(body)
    slots = placeholders(skeleton)
    tensors: list[Any] = [None] * len(slots)
    received = 0
    sizes = [(p.index, p.dtype, _nbytes(p)) for p in slots]
    for bucket in buckets(sizes):
        dtype = _dtype(slots[bucket[0]].dtype)
        count = sum(_numel(slots[i]) for i in bucket)
        flat = torch.empty(count, dtype=dtype)
        _broadcast(group, flat)
        received += flat.numel() * flat.element_size()
        at = 0
        for i in bucket:
            n = _numel(slots[i])
            part = flat[at : at + n].view(slots[i].shape)
            tensors[i] = part.to(device) if slots[i].on_device else part.clone()
            at += n
    return fill(skeleton, tensors), received


def load(state: dict[str, Any], dicts: dict[str, Any]) -> None:
    for name, obj in state.items():
        obj.load_state_dict(dicts[name])


def _flat(tensors: list[Any]) -> Any:
    import torch

    return torch.cat([t.detach().reshape(-1).cpu() for t in tensors])


def _broadcast(group: Any, flat: Any) -> None:
    import torch.distributed as dist

    options = dist.BroadcastOptions()
    options.rootRank = 0
    options.rootTensor = 0
    group.broadcast([flat], options).wait()


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
