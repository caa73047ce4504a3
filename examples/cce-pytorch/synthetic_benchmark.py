"""Example 2's script: a synthetic data-parallel benchmark, the PyTorch counterpart of the Horovod benchmark
that CCE's AITrainingJob example runs (``pytorch_synthetic_benchmark_elastic.py --num-iters=1000``).

Each iteration trains a small convolutional network on a batch of random images with DistributedDataParallel
and counts images per second. The iteration count survives restarts and resizes: it is checkpointed every
``--checkpoint-every`` iterations (and on SIGTERM) with the SDK's ``Checkpointer``, so a job that loses a worker
resumes at its last checkpoint instead of at iteration 0, and finishes after ``--num-iters`` in all.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import trainguard


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-iters", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32, help="images per worker and iteration")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--checkpoint-dir", default="checkpoints/synthetic")
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--report-every", type=int, default=50)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    net = DistributedDataParallel(model())
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    checkpointer = trainguard.Checkpointer(args.checkpoint_dir, keep=2)
    iteration = 0
    latest = checkpointer.load_latest()
    if latest is not None:
        net.module.load_state_dict(latest.state["model"])
        optimizer.load_state_dict(latest.state["optimizer"])
        iteration = latest.step

    def state() -> dict[str, object]:
        return {"model": net.module.state_dict(), "optimizer": optimizer.state_dict()}

    checkpointer.save_on_sigterm(lambda: (state(), iteration))
    generator = torch.Generator().manual_seed(rank)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=generator)
    labels = torch.randint(0, 10, (args.batch_size,), generator=generator)
    if rank == 0:
        print(
            f"[synthetic] {size} workers, resuming at iteration {iteration} of {args.num_iters}", flush=True
        )
    started, done_since = time.monotonic(), iteration
    while iteration < args.num_iters:
        with checkpointer.defer_sigterm():
            loss = torch.nn.functional.cross_entropy(net(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            iteration += 1
        trainguard.heartbeat(step=iteration, loss=loss.item())
        if iteration % args.checkpoint_every == 0:
            checkpointer.save_async(state(), iteration)
        if rank == 0 and iteration % args.report_every == 0:
            rate = (iteration - done_since) * args.batch_size * size / (time.monotonic() - started)
            print(f"[synthetic] iteration {iteration}: {rate:.0f} img/s on {size} workers", flush=True)
    checkpointer.wait()
    if rank == 0:
        print(f"[synthetic] done: {args.num_iters} iterations", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
