"""What live mode does to the state it keeps: its optimizers hooked and their gradients dropped, the device it
is on, and a newcomer's warm-up run before it joins (``trainguard.sdk.live``)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any


class WarmupStepped(RuntimeError):
    """Raised by the optimizers' pre-hook while ``warm_up`` runs: a warm-up computes, it does not train."""


def optimizers(state: dict[str, Any]) -> Iterator[Any]:
    import torch

    return (obj for obj in state.values() if isinstance(obj, torch.optim.Optimizer))


def before_each_step(state: dict[str, Any], hook: Callable[..., None]) -> None:
    """``hook`` called before each step of every optimizer of ``state`` (raising there: the step is not applied)."""
    for optimizer in optimizers(state):
        optimizer.register_step_pre_hook(hook)


def after_each_step(state: dict[str, Any], hook: Callable[..., None]) -> None:
    """``hook`` called after each step of every optimizer of ``state``."""
    for optimizer in optimizers(state):
        optimizer.register_step_post_hook(hook)


def zero_grads(state: dict[str, Any]) -> None:
    for optimizer in optimizers(state):
        optimizer.zero_grad(set_to_none=True)


def device_of(state: dict[str, Any], device: Any) -> Any:
    """Where received tensors go: ``device`` if given, else the first model's parameters', else this process's
    GPU or the CPU."""
    import torch

    if device is not None:
        return torch.device(device)
    for obj in state.values():
        if isinstance(obj, torch.nn.Module):
            for parameter in obj.parameters():
                return parameter.device
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"


def warm_up(
    state: dict[str, Any], warmup: Callable[[], Any], cause: Callable[[BaseException], str]
) -> float | None:
    """Runs ``warmup`` once, so that a process joining a job already training (a replacement, a new rank of a
    scale-out) does not make the survivors wait, in the new round's first step, for its first kernels (on a
    GPU: each kernel's first load, cuBLAS' start). The state it leaves is replaced by the survivors'; its
    gradients are dropped; an optimizer's step is refused (a warm-up computes, it does not train). A warm-up
    that fails is told on stderr (``cause``: its words) and the process joins without it: it costs the
    survivors time, never the job. The seconds it took; None when it failed.

    It runs inside a default group of this process alone (gloo over a store in memory, ``alone``), so a
    warm-up may wrap the model in DDP as ``train`` does: DDP's buckets, and on a GPU gloo's pinned host
    buffers of their sizes, are then made before the process arrives, not in the round's first step."""

    def refuse(*_: Any) -> None:
        raise WarmupStepped(
            "Live(warmup=...) stepped an optimizer: a warm-up runs a forward and a backward only"
        )

    hooks = [optimizer.register_step_pre_hook(refuse) for optimizer in optimizers(state)]
    started = time.monotonic()
    failure: str | None = None
    try:
        with alone():
            try:
                warmup()
            except Exception as error:  # a warm-up's fault must not end the worker
                failure = cause(error)
            # Here, still inside its group, the fault's traceback is let go, and with it what the warm-up made
            # (a DDP of the model, its reducer): none of it outlives the group it was made in.
    except Exception as error:  # nor may its group's start or end
        failure = failure or cause(error)
    finally:
        for hook in hooks:
            hook.remove()
        zero_grads(state)
    if failure is not None:
        print(
            f"trainguard live: the warm-up failed ({failure}); joining without it",
            file=sys.stderr,
            flush=True,
        )
        return None
    return round(time.monotonic() - started, 3)


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """torch.distributed's default group made of this process alone for the block (none is there before a
    process first arrives: the live rounds make their own), let go after it."""
    import torch.distributed as dist

    if not dist.is_available() or dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        dist.destroy_process_group()
