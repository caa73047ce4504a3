"""Memory snapshots of a GPU training state: how long one takes, what they cost the training, how far apart.

For each model size (``--sizes``: an MLP of that many parameters, trained with Adam, so its state is 12 bytes a
parameter), on one device:

- ``floor_s``: the state's bytes over the pinned device-to-host bandwidth measured in this run (on ``--device
  cpu``: over the bandwidth of a memmove); ``blocking_s``: one snapshot taken alone (``save``, then ``wait``
  until it is committed), the median of three; ``blocking_ratio`` = blocking / floor (goal <= 1.2).
- ``step_s`` and ``step_with_snapshots_s``: a training step without snapshots and with ``Snapshots.save``
  called every step at the interval ``Snapshots`` chose (``every``, logged once; ``mode``: staged or direct,
  see ``trainguard.sdk._devicecopy``), from windows run in turn, each with its last snapshot waited for;
  ``overhead`` = with / without - 1 (goal <= 0.05).
- ``checkpointer_first_s`` and ``checkpointer_later_s``: how long ``Checkpointer.save_async`` blocks the
  first time and later (goal: first <= 2x later).
- ``checks``: a state trained on a side stream, snapshotted staged and direct, with training steps running
  while the copy is under way: the restored state equals the state of its step.

The last line printed is one JSON object of all figures; ``--results DIR`` also writes it there, with the
commit, the machine and its load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _results import keep, machine

from trainguard import Checkpointer, Snapshots

#: The shortest window of steps timed, in seconds.
WINDOW_SECONDS = 1.0
SIZES = {"100M": 100_000_000, "1B": 1_000_000_000}
QUICK_SIZES = {"4M": 4_000_000, "16M": 16_000_000}


def parse_size(text: str) -> int:
    if text in SIZES:
        return SIZES[text]
    if text in QUICK_SIZES:
        return QUICK_SIZES[text]
    scale = {"K": 10**3, "M": 10**6, "B": 10**9}
    return int(float(text[:-1]) * scale[text[-1].upper()]) if text[-1].upper() in scale else int(text)


class Trainer:
    """An MLP of about ``parameters`` parameters with Adam, one fixed batch on ``device``."""

    def __init__(self, parameters: int, device: torch.device, batch: int) -> None:
        width = 8192 if parameters >= 500_000_000 else 4096 if parameters >= 50_000_000 else 512
        layers = max(1, round(parameters / (width * width + width)))
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(
            *[torch.nn.Linear(width, width, device=device) for _ in range(layers)]
        )
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-5)
        self.inputs = torch.randn(batch, width, device=device)
        self.device = device
        self.parameters = sum(p.numel() for p in self.model.parameters())

    def step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.model(self.inputs).square().mean().backward()
        self.optimizer.step()

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bandwidth(device: torch.device, size: int) -> float:
    """Bytes a second of a copy from ``device`` into pinned host memory (CPU: a memmove between two buffers)."""
    size = max(1 << 20, min(size, 2 << 30))
    source = torch.empty(size, dtype=torch.uint8, device=device)
    target = torch.empty(size, dtype=torch.uint8, pin_memory=device.type == "cuda")
    source.fill_(1)
    target.fill_(0)
    times = []
    for _ in range(4):
        sync(device)
        started = time.perf_counter()
        target.copy_(source, non_blocking=True)
        sync(device)
        times.append(time.perf_counter() - started)
    return size / statistics.median(times[1:])


def state_bytes(state: Any) -> int:
    seen: dict[tuple[int, int], int] = {}

    def walk(obj: Any) -> None:
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            seen[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        elif isinstance(obj, dict):
            for value in obj.values():
                walk(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                walk(value)

    walk(state)
    return sum(seen.values())


def window(trainer: Trainer, steps: int, first: int, snapshots: Snapshots | None) -> float:
    """Seconds a step over ``steps`` steps from step ``first`` on (the last snapshot waited for)."""
    sync(trainer.device)
    started = time.perf_counter()
    for step in range(first, first + steps):
        trainer.step()
        if snapshots is not None:
            snapshots.save(trainer.state(), step)
    if snapshots is not None:
        snapshots.wait()
    sync(trainer.device)
    return (time.perf_counter() - started) / steps


def measure_checkpointer(trainer: Trainer, directory: Path) -> dict[str, float]:
    """The blocking time of ``Checkpointer.save_async``: the first and the median of the next two."""
    checkpointer = Checkpointer(directory, keep=1)
    blocked = []
    for _ in range(3):
        trainer.step()
        sync(trainer.device)
        started = time.perf_counter()
        checkpointer.save_async(trainer.state(), len(blocked) + 1)
        blocked.append(time.perf_counter() - started)
        checkpointer.wait()
    shutil.rmtree(directory, ignore_errors=True)
    return {
        "checkpointer_first_s": round(blocked[0], 4),
        "checkpointer_later_s": round(statistics.median(blocked[1:]), 4),
        "checkpointer_first_ratio": round(blocked[0] / statistics.median(blocked[1:]), 2),
    }


def measure(
    size: int, device: torch.device, batch: int, shm: Path, disk: Path, rounds: int
) -> dict[str, Any]:
    trainer = Trainer(size, device, batch)
    for _ in range(3):
        trainer.step()
    total = state_bytes(trainer.state())
    pinned = bandwidth(device, total)
    figures: dict[str, Any] = {"parameters": trainer.parameters, "state_mb": total >> 20,
                               "bandwidth_gb_s": round(pinned / 1e9, 2)}  # fmt: skip
    figures.update(measure_checkpointer(trainer, disk / f"checkpointer-{size}"))
    directory = shm / f"snapshots-{size}"
    if device.type == "cuda":
        torch.cuda.empty_cache()
    snapshots = Snapshots(Checkpointer(disk / f"disk-{size}"), directory=directory, run_id=f"bench-{size}",
                          optimizers=[trainer.optimizer])  # fmt: skip
    step = 1
    while snapshots.every is None:  # until the interval is chosen (a GPU state: a few steps after the first)
        trainer.step()
        snapshots.save(trainer.state(), step)
        step += 1
    every = snapshots.every
    for _ in range(2 * every + 2):  # both slots used at least once more
        trainer.step()
        snapshots.save(trainer.state(), step)
        step += 1
    snapshots.wait()
    # Windows of at least a second (a 6 ms step's 36-step window was within its noise) and four snapshots.
    probe = window(trainer, 10, step, None)
    step += 10
    steps = max(20, 4 * every, math.ceil(WINDOW_SECONDS / probe / every) * every)
    plain, snapped = [], []
    for _ in range(rounds):  # in turn, so that a change in the machine's pace falls on both
        plain.append(window(trainer, steps, step, None))
        step += steps
        step += -step % every  # each window starts at a snapshot
        snapped.append(window(trainer, steps, step, snapshots))
        step += steps
    blocking = []
    for _ in range(3):
        trainer.step()
        step += -step % every
        sync(device)
        started = time.perf_counter()
        assert snapshots.save(trainer.state(), step) == "memory"
        snapshots.wait()
        blocking.append(time.perf_counter() - started)
        step += 1
    floor = total / pinned
    figures.update(
        mode=snapshots.copy_mode,
        every=every,
        floor_s=round(floor, 4),
        blocking_s=round(statistics.median(blocking), 4),
        blocking_ratio=round(statistics.median(blocking) / floor, 3),
        step_s=round(statistics.median(plain), 5),
        step_with_snapshots_s=round(statistics.median(snapped), 5),
        overhead=round(statistics.median(snapped) / statistics.median(plain) - 1, 4),
        windows={"plain": [round(x, 5) for x in plain], "snapshots": [round(x, 5) for x in snapped]},
    )
    snapshots.close()
    del trainer, snapshots
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return figures


def equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def cpu_copy(state: Any) -> Any:
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return {key: cpu_copy(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(cpu_copy(value) for value in state)
    return state


def check(device: torch.device, staging: bool, shm: Path, disk: Path) -> bool:
    """Train on a side stream, snapshot every step, and keep training after the last snapshot while its copy
    runs: the restored state must be the state of the last snapshot's step."""
    trainer = Trainer(50_000_000 if device.type == "cuda" else 2_000_000, device, 256)
    name = f"check-{'staged' if staging else 'direct'}"
    snapshots = Snapshots(Checkpointer(disk / name), directory=shm / name, run_id=name, every=1,
                          gpu_staging=staging, optimizers=[trainer.optimizer])  # fmt: skip
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    expected = {}
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        for step in range(1, 9):
            trainer.step()
            snapshots.save(trainer.state(), step)
            expected[step] = cpu_copy(trainer.state())
        for _ in range(3):  # these change the tensors whose copy is still under way
            trainer.step()
    snapshots.wait()
    restored = snapshots.restore()
    snapshots.close()
    return bool(restored is not None and restored.step == 8 and equal(restored.state, expected[8]))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument(
        "--sizes", nargs="+", default=None, help="model sizes: 100M 1B (default; cpu: 4M 16M)"
    )
    parser.add_argument("--batch", type=int, default=None, help="rows a step (default 2048; cpu: 64)")
    parser.add_argument("--rounds", type=int, default=3, help="windows of each kind, in turn (3)")
    parser.add_argument("--shm", default="/dev/shm", help="the shared memory the snapshots go to")
    parser.add_argument("--disk", default=None, help="where checkpoints are written (a temporary directory)")
    parser.add_argument("--results", default=None, help="also write the JSON into this directory")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print("no CUDA device here: run with --device cpu", file=sys.stderr)
            return 2
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.cuda.set_device(device)
    sizes = [
        parse_size(s) for s in (args.sizes or (["100M", "1B"] if device.type == "cuda" else ["4M", "16M"]))
    ]
    batch = args.batch or (2048 if device.type == "cuda" else 64)
    shm = Path(tempfile.mkdtemp(prefix="gpu-snapshots-", dir=args.shm))
    disk = Path(tempfile.mkdtemp(prefix="gpu-snapshots-disk-", dir=args.disk))
    started = time.perf_counter()
    try:
        results: dict[str, Any] = {"device": str(device), "batch": batch, "machine": machine()}
        if device.type == "cpu":
            results["note"] = (
                "on CPU the figures are not the GPU goals' (no pinned copies, every step snapshotted)"
            )
        results["checks"] = {
            mode: check(device, mode == "staged", shm, disk) for mode in ("staged", "direct")
        }
        results["sizes"] = {}
        for size in sizes:
            results["sizes"][str(size)] = measure(size, device, batch, shm, disk, args.rounds)
            print(json.dumps({str(size): results["sizes"][str(size)]}), flush=True)
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        shutil.rmtree(disk, ignore_errors=True)
    results["seconds"] = round(time.perf_counter() - started, 1)
    if args.results:
        keep("gpu_snapshots", results, args.results)
    print(json.dumps(results))
    return 0 if all(results["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
