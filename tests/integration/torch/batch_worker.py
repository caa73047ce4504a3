"""A live-mode worker that keeps the global batch (``trainguard.GlobalBatch``): a small regression MLP under DDP
over gloo on a fixed dataset, every process starting from the same parameters. Each step takes the next
``TARGET`` samples of the epoch's order (``ElasticSampler``, positioned from the step), each rank its share as
micro-batches of at most ``MICRO`` (the accumulation varies with the world), so that the step's gradient is the
mean over the same global batch whatever the world. One JSON line per event on stdout; every ``EVERY`` steps
rank 0's line carries the parameters. ``BATCH_STEPS``: the steps to train; ``BATCH_DELAY``: seconds a step.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import trainguard

TARGET = 12
MICRO = 2
SAMPLES = 480  # 40 steps an epoch
EVERY = 10


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), **fields}), flush=True)


def main() -> None:
    data = torch.Generator().manual_seed(1)
    inputs = torch.randn(SAMPLES, 16, generator=data)
    targets = (inputs @ torch.randn(16, 1, generator=data)).tanh() + 0.1 * torch.randn(
        SAMPLES, 1, generator=data
    )
    torch.manual_seed(0)  # the same parameters in every process and every run
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch = trainguard.GlobalBatch(TARGET, micro_max=MICRO, worlds=range(1, 5))
    sampler = trainguard.ElasticSampler(SAMPLES, shuffle=True, seed=7, rank=0, world_size=1)
    steps, delay = int(os.environ.get("BATCH_STEPS", "100000")), float(os.environ.get("BATCH_DELAY", "0"))
    live = trainguard.Live({"model": model, "optimizer": optimizer}, timeout=10)
    emit("ready", member=live.member)

    def train(live: trainguard.Live) -> None:
        emit("formed", **live.formations[-1].as_dict())
        ddp = DDP(model, init_sync=False)
        plan = batch.plan(live.world_size)
        sampler.set_world(live.rank, live.world_size)
        for step in live.steps(steps):
            epoch, position = divmod(step * TARGET, SAMPLES)
            sampler.seek(epoch, position)
            mine = list(itertools.islice(iter(sampler), plan.per_rank))
            optimizer.zero_grad()
            for first in range(0, plan.per_rank, plan.micro):
                part = mine[first : first + plan.micro]
                # Each micro-batch's mean over the rank's accumulation; DDP averages over the ranks: the mean
                # over the global batch.
                (F.mse_loss(ddp(inputs[part]), targets[part]) / plan.accumulation).backward()
            optimizer.step()
            fields: dict[str, object] = {"step": step + 1, "rank": live.rank, "world": live.world_size,
                                         "micro": plan.micro, "accumulation": plan.accumulation}  # fmt: skip
            if live.rank == 0 and (step + 1) % EVERY == 0:
                fields["params"] = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
            emit("step", **fields)
            if delay:
                time.sleep(delay)
        emit("done", step=live.step)

    live.run(train)


if __name__ == "__main__":
    sys.exit(main())
