"""How long a checkpoint blocks the training loop: ``Checkpointer.save_async`` vs a synchronous ``torch.save``.

The state is a CPU model of ``--model-mb`` MB of parameters plus its Adam optimizer state (twice that again),
as a training loop checkpoints it. Each repetition takes a training step first, so every save sees fresh
values; the async save of a repetition starts after the previous one finished writing (a checkpoint interval
longer than a write), and its blocked time is the duration of the ``save_async`` call: the snapshot to memory.

Figures (medians over ``--repeats``): ``sync_blocked_s`` (torch.save to a file), ``sync_checkpointer_s``
(Checkpointer.save: torch.save, fsync, rename), ``async_blocked_s``, ``async_write_s`` (from save_async to the
file being durable: the shortest sensible checkpoint interval), ``step_s`` and ``step_during_write_s`` (a
training step alone and while a background write runs, which shares the CPU), and ``ratio`` =
async_blocked_s / sync_blocked_s (target <= 0.1), and ``ratio_of_fastest``, the same for the fastest run of
each. The last line printed is one JSON object of them all.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from trainguard import Checkpointer

TARGET_RATIO = 0.1


def build(model_mb: float) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    width = 2048
    layers = max(1, round(model_mb * 2**20 / (4 * (width * width + width))))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    return model, optimizer


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
    started = time.perf_counter()
    optimizer.zero_grad()
    model(torch.randn(8, 2048)).square().mean().backward()
    optimizer.step()
    return time.perf_counter() - started


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model-mb", type=float, default=100.0, help="parameters, in MB (default 100)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, help="where to write (default: a temporary directory)")
    args = parser.parse_args()

    model, optimizer = build(args.model_mb)
    train_step(model, optimizer)  # creates Adam's state, so it is part of every checkpoint

    def state() -> dict[str, Any]:
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

    state_mb = sum(t.numel() * t.element_size() for t in _tensors(state())) / 2**20
    params_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    print(f"state: {state_mb:.0f} MB ({params_mb:.0f} MB of parameters + Adam), {args.repeats} repetitions")

    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        directory = Path(scratch)
        checkpointer = Checkpointer(directory / "async", keep=2)
        sync_checkpointer = Checkpointer(directory / "sync", keep=2)
        sync, sync_ckpt, blocked, written, idle_steps, busy_steps = [], [], [], [], [], []
        for step in range(1, args.repeats + 1):
            idle_steps.append(train_step(model, optimizer))
            sync.append(timed(lambda: torch.save(state(), directory / "plain.pt")))
            sync_ckpt.append(timed(lambda step=step: sync_checkpointer.save(state(), step)))

            # Untimed: flush plain.pt now, so the kernel's writeback of the baseline's file does not share the
            # memory bus and the two cores with the snapshot measured next.
            os.sync()
            train_step(model, optimizer)
            started = time.perf_counter()
            checkpointer.save_async(state(), step)
            blocked.append(time.perf_counter() - started)
            while checkpointer.writing:  # training goes on while the write runs
                busy_steps.append(train_step(model, optimizer))
            checkpointer.wait()
            written.append(time.perf_counter() - started)
            print(
                f"  {step}: torch.save {sync[-1]:.3f} s, Checkpointer.save {sync_ckpt[-1]:.3f} s, "
                f"save_async blocked {blocked[-1]:.3f} s (written in {written[-1]:.3f} s)"
            )
        loaded = checkpointer.load_latest()
        if loaded is None or loaded.step != args.repeats:
            raise SystemExit(f"the last async checkpoint did not load back: {loaded}")

    figures = {
        "state_mb": round(state_mb, 1),
        "params_mb": round(params_mb, 1),
        "repeats": args.repeats,
        "sync_blocked_s": round(statistics.median(sync), 4),
        "sync_checkpointer_s": round(statistics.median(sync_ckpt), 4),
        "async_blocked_s": round(statistics.median(blocked), 4),
        "async_first_blocked_s": round(blocked[0], 4),  # includes allocating the kept snapshot buffers
        "async_write_s": round(statistics.median(written), 4),
        "step_s": round(statistics.median(idle_steps), 4),
        "step_during_write_s": round(statistics.median(busy_steps), 4) if busy_steps else None,
    }
    figures["ratio"] = round(figures["async_blocked_s"] / figures["sync_blocked_s"], 4)
    # On a shared machine the medians carry other processes' load; the fastest runs show the floor.
    figures["ratio_of_fastest"] = round(min(blocked) / min(sync), 4)
    figures["ratio_vs_checkpointer_save"] = round(
        figures["async_blocked_s"] / figures["sync_checkpointer_s"], 4
    )
    figures["target_ratio"] = TARGET_RATIO
    figures["target_met"] = figures["ratio"] <= TARGET_RATIO
    print(json.dumps(figures))


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for value in obj.values() for t in _tensors(value)]
    if isinstance(obj, (list, tuple)):
        return [t for value in obj for t in _tensors(value)]
    return []


if __name__ == "__main__":
    main()
