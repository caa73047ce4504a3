"""Example 3: CCE's AITrainingJob example (a Horovod job), trained with Horovod's elastic PyTorch API on
scikit-learn's digits.

horovodrun (in the launcher pod) starts this script once per slot that host discovery offers, in the trainer
pods. It trains a small MLP with ``hvd.DistributedOptimizer`` on Gloo and lets Horovod's elastic mode carry it
through faults and resizes:

- ``hvd.elastic.TorchState`` holds the model, the optimizer, the sampler, the epoch and the step; ``commit()``
  every ``--commit-every`` steps keeps a copy in memory. When a worker dies, the survivors roll back to the
  last commit and go on with fewer workers; when hosts are added, the workers stop at the next commit and the
  new ones receive the state from rank 0 (``sync``).
- ``hvd.elastic.ElasticSampler``: after a reset the epoch continues with the samples not yet seen, split over
  the new set of workers.
- The global batch stays ``--global-batch`` whatever the world size (each rank takes its share, rebuilt on
  every reset) and the learning rate follows a cosine over the epochs, so a resized run follows nearly the same
  optimisation as one that was not.

The data is the 1797 8x8 images of ``sklearn/datasets/data/digits.csv.gz``, read straight from the installed
package; nothing is downloaded. A fixed permutation keeps 360 images for testing.

With ``--events FILE`` the worker that is rank 0 at the time appends JSON lines (``start`` after every
(re)start with the world size, ``step``, ``done`` with the test accuracy): what the integration test reads.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import math
import time
from pathlib import Path
from typing import Any

import horovod.torch as hvd
import torch
from torch.utils.data import DataLoader, TensorDataset

TEST_SIZE = 360


def load_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """The digits as (1797 x 64 floats in [0, 1], 1797 labels), from the file scikit-learn ships."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without importing it (seconds saved)
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


def accuracy(model: torch.nn.Module, data: TensorDataset) -> float:
    features, labels = data.tensors
    with torch.no_grad():
        return float((model(features).argmax(dim=1) == labels).float().mean())


class Events:
    """JSON lines of progress, written by whichever worker is rank 0 now (ranks change with the world)."""

    def __init__(self, path: str | None) -> None:
        self.path = Path(path) if path else None

    def __call__(self, event: str, **fields: Any) -> None:
        if self.path is None or hvd.rank() != 0:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as handle:
            handle.write(json.dumps({"t": time.time(), "event": event, **fields}) + "\n")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--global-batch", type=int, default=64, help="samples per step over all ranks")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--commit-every", type=int, default=5, help="steps between commits of the state")
    parser.add_argument("--report-every", type=int, default=20, help="steps between progress lines")
    parser.add_argument("--step-delay", type=float, default=0.0, help="seconds of sleep per step (pacing)")
    parser.add_argument("--events", default=None, help="rank 0 appends JSON progress lines here")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    hvd.init()
    torch.set_num_threads(1)  # several workers share this machine's cores
    events = Events(args.events)
    train_set, test_set = split(*load_digits())

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
        named_parameters=model.named_parameters(),
    )
    sampler = hvd.elastic.ElasticSampler(train_set, shuffle=True, seed=0)
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0, step=0)
    loader: list[DataLoader[Any]] = []

    def rebuild_loader() -> None:
        """Each rank's share of the global batch, for the world as it is now."""
        loader[:] = [
            DataLoader(train_set, batch_size=math.ceil(args.global_batch / hvd.size()), sampler=sampler)
        ]

    def announce() -> None:
        rebuild_loader()
        events("start", step=state.step, epoch=state.epoch, world=hvd.size())
        if hvd.rank() == 0:
            print(
                f"[horovod] world of {hvd.size()}: training from step {state.step} (epoch {state.epoch})",
                flush=True,
            )

    @hvd.elastic.run
    def train(state: hvd.elastic.TorchState) -> None:
        announce()
        while state.epoch < args.epochs:
            for features, labels in loader[0]:
                progress = (state.epoch + state.sampler.processed_num / len(train_set)) / args.epochs
                for group in optimizer.param_groups:  # cosine decay: the same at any world size
                    group["lr"] = args.lr * 0.5 * (1 + math.cos(math.pi * progress))
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(features), labels)
                loss.backward()
                optimizer.step()
                state.sampler.record_batch(0, len(labels))
                state.step += 1
                events(
                    "step", step=state.step, epoch=state.epoch, loss=round(loss.item(), 5), world=hvd.size()
                )
                if hvd.rank() == 0 and state.step % args.report_every == 0:
                    print(
                        f"[horovod] step {state.step} epoch {state.epoch} world {hvd.size()} loss {loss.item():.4f}",
                        flush=True,
                    )
                if args.step_delay:
                    time.sleep(args.step_delay)
                if state.step % args.commit_every == 0:
                    state.commit()  # a checkpoint in memory; raises HostsUpdatedInterrupt when hosts were added
            state.epoch += 1
            state.sampler.set_epoch(
                state.epoch
            )  # at the end of the epoch: a reset mid-epoch keeps its progress
            state.commit()

    train(state)
    result = accuracy(model, test_set)
    events("done", step=state.step, accuracy=result, world=hvd.size())
    if hvd.rank() == 0:
        print(
            f"[horovod] done: {state.step} steps, {args.epochs} epochs, test accuracy {result:.4f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
