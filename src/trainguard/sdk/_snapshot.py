"""A CPU copy of a training state that later training steps cannot change.

The copy has the same structure and types as the original (an ``OrderedDict`` state dict keeps its
``_metadata``, optimizer state keeps its lists and ints), and tensors that shared storage still share it, so
``torch.save`` of the snapshot writes what ``torch.save`` of the original would have written at that moment.
"""

from __future__ import annotations

import copy
from typing import Any

# Containers searched for tensors before the deep copy; tensors elsewhere (inside user objects) are deep-copied
# by their own ``__deepcopy__``, which is also a faithful copy, only on their original device.
_CONTAINERS = (dict, list, tuple)


def snapshot(state: Any) -> Any:
    import torch

    memo: dict[int, Any] = {}
    storages: dict[tuple[str, int, int], Any] = {}

    def visit(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            if id(obj) not in memo:
                memo[id(obj)] = _copy_tensor(obj, storages)
        elif isinstance(obj, dict):
            for value in obj.values():
                visit(value)
        elif isinstance(obj, _CONTAINERS):
            for value in obj:
                visit(value)

    visit(state)
    # deepcopy consults the memo by id first, so each tensor found above is replaced by its CPU copy, and all
    # the rest (containers, numbers, user objects) is copied with its exact type.
    return copy.deepcopy(state, memo)


def _copy_tensor(tensor: Any, storages: dict[tuple[str, int, int], Any]) -> Any:
    import torch

    plain = type(tensor) in (torch.Tensor, torch.nn.Parameter)
    unusual = tensor.layout != torch.strided or tensor.is_quantized or tensor.is_conj() or tensor.is_neg()
    if not plain or unusual or tensor.device.type == "meta":
        # Sparse, quantized, lazily conjugated, subclassed or meta tensors: a detached copy, sharing nothing.
        out = tensor.detach().to("cpu", copy=True)
    else:
        storage = tensor.untyped_storage()
        key = (str(tensor.device), storage.data_ptr(), storage.nbytes())
        cpu_storage = storages.get(key)
        if cpu_storage is None:
            cpu_storage = storage.clone() if tensor.device.type == "cpu" else storage.cpu()
            storages[key] = cpu_storage
        out = torch.empty(0, dtype=tensor.dtype).set_(
            cpu_storage, tensor.storage_offset(), tensor.size(), tensor.stride()
        )
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(out, requires_grad=tensor.requires_grad)
    return out
