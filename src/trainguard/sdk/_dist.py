"""torch.distributed as ``Snapshots`` uses it: whether it is up, and the collectives of its own (every rank's
value, a token chosen by rank 0). torch is imported only when one of them is called, never by the SDK itself."""

from __future__ import annotations

import secrets
import sys
from typing import Any


def distributed() -> bool:
    """Whether torch.distributed is initialized (without importing it: if the script has not, it is not)."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def all_gather(value: Any) -> list[Any]:
    """Every rank's ``value``, in the order of the ranks (call it on every rank)."""
    import torch.distributed as dist

    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def broadcast_token() -> str:
    """A secret that rank 0 draws, the same on every rank (call it on every rank)."""
    import torch.distributed as dist

    box = [secrets.token_hex(16) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return str(box[0])
