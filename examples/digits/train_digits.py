"""Example 1: data-parallel classification of scikit-learn's bundled digits, surviving kills and resizes.

Every worker runs this script (under torchrun's elastic agent, which trainguard starts in each pod). It trains
a small MLP with DistributedDataParallel on gloo, and uses the whole SDK:

- ``Checkpointer``: an async checkpoint every ``--checkpoint-every`` steps, one more on SIGTERM (torchrun
  stops workers with SIGTERM before a re-rendezvous, so a planned resize loses no step);
- ``ElasticSampler``: after a restart or a resize the epoch continues where it stopped, each sample once;
- ``elastic()``: the world size, torchrun's restart count, and whether the world changed;
- ``heartbeat()``: progress for hang detection and ``trainguard describe``;
- with ``--live``, ``Live``: the survivors of a fault or a resize keep their process and their state, and a
  newcomer receives it from one of them (the job needs the annotation ``trainguard.io/live: "true"``);
- with ``--snapshots``, ``Snapshots``: every step in shared memory (each worker's copy, under DDP, a replica
  of the others'), so a fault loses at most the step in progress (``--checkpoint-every`` then says how often
  memory is persisted to disk).

The data is the 1797 8x8 images of ``sklearn/datasets/data/digits.csv.gz``, read straight from the installed
package (importing scikit-learn would add seconds to every worker start); nothing is downloaded. A fixed
permutation keeps 360 images for testing. The global batch stays ``--global-batch`` whatever the world size
(each rank takes its share) and the learning rate follows a cosine over the epochs' progress, so a run that
was resized follows nearly the same optimisation as one that was not.

With ``--events FILE`` rank 0 appends one JSON object per line (``start``, ``step``, ``checkpoint``, ``done``)
with the wall-clock time: what the demo, the tests and the benchmarks read.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

import trainguard

TEST_SIZE = 360


def load_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """The digits as (1797 x 64 floats in [0, 1], 1797 labels), from the file scikit-learn ships."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("scikit-learn is not installed: pip install scikit-learn (its digits data is used)")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as handle:
        rows = [[int(value) for value in line.split(",")] for line in handle if line.strip()]
    table = torch.tensor(rows, dtype=torch.float32)
    return table[:, :-1] / 16.0, table[:, -1].long()


def split(features: torch.Tensor, labels: torch.Tensor) -> tuple[TensorDataset, TensorDataset]:
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    test, train = order[:TEST_SIZE], order[TEST_SIZE:]
    return TensorDataset(features[train], labels[train]), TensorDataset(features[test], labels[test])


def build_model(width: int = 128, layers: int = 1) -> torch.nn.Module:
    """An MLP of ``layers`` hidden layers of ``width``: 64 -> 128 -> 10 by default (9 k parameters);
    ``--width 4096 --layers 7`` makes it a synthetic 100 M-parameter model for the benchmarks."""
    torch.manual_seed(0)  # every rank starts from the same weights (DDP would broadcast them anyway)
    parts: list[torch.nn.Module] = [torch.nn.Linear(64, width), torch.nn.ReLU()]
    for _ in range(layers - 1):
        parts += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*parts, torch.nn.Linear(width, 10))


def accuracy(model: torch.nn.Module, data: TensorDataset) -> float:
    features, labels = data.tensors
    with torch.no_grad():
        return float((model(features).argmax(dim=1) == labels).float().mean())


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    sampler: trainguard.ElasticSampler,
    features: torch.Tensor,
    labels: torch.Tensor,
    size: int,
    args: argparse.Namespace,
    epoch: int,
) -> torch.Tensor:
    """One step of the whole job: the learning rate of its progress, the update, the sampler advanced."""
    progress = (epoch + sampler.consumed / sampler.dataset_len) / args.epochs
    for group in optimizer.param_groups:  # cosine decay: the same at any world size
        group["lr"] = args.lr * 0.5 * (1 + math.cos(math.pi * progress))
    loss = torch.nn.functional.cross_entropy(model(features), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    sampler.advance(len(labels) * size)
    return loss


class Events:
    """Rank 0's JSON-lines log of progress (``--events``); does nothing on other ranks or without a file."""

    def __init__(self, path: str | None, rank: int) -> None:
        self._file = None
        if path and rank == 0:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", buffering=1)  # noqa: SIM115 - closed by close()

    def __call__(self, event: str, **fields: Any) -> None:
        if self._file is not None:
            self._file.write(json.dumps({"t": time.time(), "event": event, **fields}) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--global-batch", type=int, default=64, help="samples per step over all ranks")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--width", type=int, default=128, help="units of each hidden layer")
    parser.add_argument("--layers", type=int, default=1, help="hidden layers")
    parser.add_argument("--checkpoint-dir", default="checkpoints/digits")
    parser.add_argument("--checkpoint-every", type=int, default=20, help="steps between async checkpoints")
    parser.add_argument("--step-delay", type=float, default=0.0, help="seconds of sleep per step (pacing)")
    parser.add_argument("--events", default=None, help="rank 0 appends JSON progress lines here")
    parser.add_argument(
        "--snapshots",
        action="store_true",
        help="snapshot every step into shared memory (trainguard.Snapshots; under DDP each worker's copy is "
        "the others' replica); "
        "every --checkpoint-every-th is persisted to disk",
    )
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="with --snapshots: keep the parameters and the optimizer's state in shared memory itself, so a "
        "snapshot copies only the rest (Snapshots(in_place=True))",
    )
    parser.add_argument(
        "--live",
        action="store_true",
        help="live mode (trainguard.Live): survivors keep training through faults and resizes; the job needs "
        'the annotation trainguard.io/live: "true"',
    )
    parser.add_argument(
        "--save-on-sigterm",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="checkpoint when stopped (SIGTERM) inside the grace period",
    )
    return parser.parse_args()


def rank_batch(global_batch: int, size: int) -> int:
    """Each rank's batch: an equal share of the global batch (``trainguard.GlobalBatch``) where the world divides
    it, so the global batch stays the same through every change (e.g. 60 for worlds 1-6); else a little more."""
    try:
        return trainguard.GlobalBatch(global_batch).plan(size).per_rank
    except ValueError:  # this world does not divide it: the global batch grows to the next multiple
        return math.ceil(global_batch / size)


def main_live(args: argparse.Namespace) -> None:
    """Live mode: ``train`` is entered again, in the same process, after each re-formation."""
    train_set, test_set = split(*load_digits())
    model = build_model(args.width, args.layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler = trainguard.ElasticSampler(len(train_set), shuffle=True, seed=0, rank=0, world_size=1)
    checkpointer = trainguard.Checkpointer(args.checkpoint_dir, keep=3)

    def restore() -> tuple[int, str] | None:  # nobody alive holds the state: the last checkpoint
        latest = checkpointer.load_latest()
        if latest is None:
            return None
        model.load_state_dict(latest.state["model"])
        optimizer.load_state_dict(latest.state["optimizer"])
        sampler.load_state_dict(latest.state["sampler"])
        return latest.step, "disk"

    live = trainguard.Live({"model": model, "optimizer": optimizer, "sampler": sampler}, restore=restore)

    def train(live: trainguard.Live) -> None:
        rank, size = live.rank, live.world_size
        events = Events(args.events, rank)
        formed = live.formations[-1]
        events("start", step=live.step, world=size, pid=os.getpid(), source=formed.origin, round=formed.round)
        print(
            f"[digits] rank {rank}/{size}: round {formed.round} at step {live.step} ({formed.origin})",
            flush=True,
        )
        try:
            train_round(live, events)
        finally:  # a fault ends the round: its rank 0 may be another process next time
            events.close()

    def train_round(live: trainguard.Live, events: Events) -> None:
        rank, size = live.rank, live.world_size
        model_ddp = DistributedDataParallel(model, init_sync=False)
        sampler.set_world(rank, size)
        per_rank = rank_batch(args.global_batch, size)
        loader = DataLoader(train_set, batch_size=per_rank, sampler=sampler)
        for epoch in range(sampler.epoch, args.epochs):
            sampler.set_epoch(epoch)
            # As many batches on every rank: the members agree before each optimizer step, a collective that
            # DDP's join() does not shadow for a rank whose share of the epoch's rest is one batch shorter.
            steps = sampler.even_batches(per_rank)
            with model_ddp.join():
                for features, labels in itertools.islice(loader, steps):
                    loss = train_step(model_ddp, optimizer, sampler, features, labels, size, args, epoch)
                    live.advance()
                    trainguard.heartbeat(step=live.step, loss=loss.item())
                    events(
                        "step",
                        step=live.step,
                        epoch=epoch,
                        loss=round(loss.item(), 5),
                        world=size,
                        pid=os.getpid(),
                        batch=per_rank * size,
                    )
                    if live.step % args.checkpoint_every == 0:  # rank 0 writes
                        checkpointer.save_async(
                            {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "sampler": sampler.state_dict()},
                            live.step,
                        )  # fmt: skip
                    if args.step_delay:
                        time.sleep(args.step_delay)
        checkpointer.wait()
        result = accuracy(model, test_set)
        events("done", step=live.step, accuracy=result, world=size)
        print(
            f"[digits] rank {rank}/{size}: done at step {live.step}, test accuracy {result:.4f}", flush=True
        )

    live.run(train)


def main() -> None:
    args = parse_args()
    if args.live:
        main_live(args)
        return
    dist.init_process_group("gloo")
    world = trainguard.elastic()
    rank, size = dist.get_rank(), dist.get_world_size()
    events = Events(args.events, rank)
    train_set, test_set = split(*load_digits())

    model = DistributedDataParallel(build_model(args.width, args.layers))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler = trainguard.ElasticSampler(len(train_set), shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=math.ceil(args.global_batch / size), sampler=sampler)
    checkpointer = trainguard.Checkpointer(args.checkpoint_dir, keep=3)
    snapshots = None
    if args.snapshots:
        try:
            snapshots = trainguard.Snapshots(
                checkpointer,
                persist_every=args.checkpoint_every,
                optimizers=[optimizer],
                in_place=args.in_place,
            )
        except ValueError as error:  # no identity for the run (plain torchrun without --rdzv-id)
            sys.exit(f"train_digits.py --snapshots: {error}")

    def state() -> dict[str, Any]:
        return {
            "model": model.module.state_dict(),
            "optimizer": optimizer.state_dict(),
            "sampler": sampler.state_dict(),
        }

    resumed: tuple[int, dict[str, Any], str] | None = None
    if snapshots is not None:  # every rank: the newest step all can reach (memory, a buddy's copy, disk)
        restored = snapshots.restore(like=state())  # only this run's snapshots, of this model's shape
        resumed = (restored.step, restored.state, restored.source) if restored is not None else None
    else:
        latest = checkpointer.load_latest()
        resumed = (latest.step, latest.state, "disk") if latest is not None else None
    step, source = 0, "none"
    if resumed is not None:
        step, saved, source = resumed
        model.module.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        sampler.load_state_dict(saved["sampler"])
    events("start", step=step, world=size, restart=world.restart_count, pid=os.getpid(), source=source)
    print(
        f"[digits] rank {rank}/{size}: starting at step {step} from {source} (epoch {sampler.epoch}, "
        f"torchrun restart {world.restart_count}{', world changed' if world.world_changed else ''})",
        flush=True,
    )

    if args.save_on_sigterm:
        (snapshots or checkpointer).save_on_sigterm(lambda: (state(), step))
    for epoch in range(sampler.epoch, args.epochs):
        sampler.set_epoch(epoch)
        with model.join():
            for features, labels in loader:
                with checkpointer.defer_sigterm():
                    loss = train_step(model, optimizer, sampler, features, labels, size, args, epoch)
                    step += 1
                trainguard.heartbeat(step=step, loss=loss.item())
                events("step", step=step, epoch=epoch, loss=round(loss.item(), 5), world=size)
                if snapshots is not None:
                    snapshots.save(state(), step)  # memory; every --checkpoint-every-th to disk too
                elif step % args.checkpoint_every == 0:
                    checkpointer.save_async(state(), step)
                    events("checkpoint", step=step)
                if args.step_delay:
                    time.sleep(args.step_delay)
    if snapshots is not None:
        snapshots.close()
    checkpointer.wait()
    result = accuracy(model.module, test_set)
    events("done", step=step, accuracy=result, world=size)
    print(f"[digits] rank {rank}/{size}: done at step {step}, test accuracy {result:.4f}", flush=True)
    events.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
