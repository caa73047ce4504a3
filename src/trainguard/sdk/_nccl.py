"""What live mode needs of a round's collectives backend, NCCL's above all:

- ``prepare``: NCCL's error handling set so that a fault never tears a survivor's process down. torch's default
  (``TORCH_NCCL_ASYNC_ERROR_HANDLING=1``, tear down) makes NCCL's watchdog end the process when a collective
  fails or times out, the opposite of live mode; ``2`` (clean up only) aborts the communicator and raises in
  the training thread, which live mode turns into the next round. Set by trainguard where the user did not; a
  user's ``1`` or ``3`` (tear down, skip clean-up) is said on stderr, and the job then recovers as without live
  mode (its pods restarted): trainguard's control plane turns live mode off for such a job and says why.
- ``abort``: the round's communicator aborted from the watchdog's thread, while the training thread waits in
  a collective on it (a dead, hung or silent member): that collective fails at once.
- ``agree``: every member of the round finished the step's collectives before any applies it: a one-element
  all-reduce (the minimum), read back to the host, so that on NCCL every collective enqueued before it has
  completed, not only been enqueued; on gloo, collectives are complete when they return.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

from trainguard.pod import contract


def prepare(env: Any = os.environ) -> bool:
    """NCCL's error handling set to clean up only, where the user did not choose; False (and said on stderr)
    where the user's choice kills survivors (``contract.nccl_refusal``)."""
    why = contract.nccl_refusal(env)
    if why is not None:
        print(
            f"trainguard live: live mode cannot keep the survivors of a fault: {why}",
            file=sys.stderr,
            flush=True,
        )
        return False
    env.setdefault(contract.NCCL_ERROR_HANDLING[0], contract.NCCL_CLEAN_UP_ONLY)
    return True


def abort() -> None:
    """Aborts the round's NCCL communicator (the default group), where there is one."""
    import torch.distributed as dist

    with contextlib.suppress(Exception):
        if dist.is_initialized():
            dist.group.WORLD.abort()  # type: ignore[union-attr]


def agree(backend: str, device: Any) -> None:
    """Every member of the round reached this point with its step's collectives finished; RuntimeError where
    one did not (its collective failed, the round was aborted)."""
    import torch
    import torch.distributed as dist

    where = device if backend == "nccl" else "cpu"
    flag = torch.ones(1, device=where)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    if float(flag.item()) < 1.0:  # .item(): the host waits for the all-reduce, and on NCCL all before it
        raise RuntimeError("live: a member did not finish the step's collectives")
