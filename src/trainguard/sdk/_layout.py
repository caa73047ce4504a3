"""A training state taken apart for a snapshot: its skeleton (the state with each tensor replaced by a
reference into the data), where each tensor storage's bytes go (64-byte aligned), the copy of those bytes, and
the state rebuilt from them; and the state's structure (each tensor's place, dtype and shape), what tells
whether a snapshot fits a state."""

from __future__ import annotations

import ctypes
import mmap
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

ALIGN = 64
#: Copies are cut into pieces of this size so that threads share the work evenly.
CHUNK_BYTES = 8 << 20


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

    ``placed(address)``: the offset of a CPU storage that is in the data already (``StateRegion``), None for
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
