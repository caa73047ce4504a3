"""Where this process stands in the job: rank, local rank and world size.

torch.distributed is asked when it is initialized; otherwise the variables that torchrun (and the trainguard
runtime) set are read, and a plain ``python train.py`` is rank 0 of a world of 1. torch is never imported here:
if the training script has not imported it, torch.distributed cannot be initialized.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from trainguard.pod import contract


@dataclass(frozen=True)
class World:
    rank: int
    local_rank: int
    world_size: int


def current_world() -> World:
    local_rank = env_int(contract.LOCAL_RANK, 0)
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return World(rank=dist.get_rank(), local_rank=local_rank, world_size=dist.get_world_size())
    return World(
        rank=env_int(contract.RANK, 0), local_rank=local_rank, world_size=env_int(contract.WORLD_SIZE, 1)
    )


def env_int(name: str, default: int) -> int:
    """An integer environment variable; a value that is not one is an error naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(
            f"environment variable {name}={raw!r} is not an integer; unset it or fix it"
        ) from None
