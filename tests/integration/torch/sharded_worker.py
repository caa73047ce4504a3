"""A live-mode worker whose state is sharded (FSDP2 over gloo, ``Live(build=...)``) and which keeps the global
batch (``trainguard.GlobalBatch``): a small regression MLP, each Linear and the whole model ``fully_shard``-ed
over the round's mesh, SGD with momentum (its buffers sharded too), on a fixed dataset. Each step takes the next
``TARGET`` samples of the epoch's order (``ElasticSampler``), each rank its share as micro-batches of at most
``MICRO``. One JSON line per event on stdout: each step's line carries a hash of the rank's shards of the
parameters (``shard``); every ``EVERY`` steps rank 0's carries the whole parameters (``params``, gathered from
the shards). ``SHARDED_STEPS``: the steps to train; ``SHARDED_DELAY``: seconds a step. ``restore=`` says when
it is called (``restore``) and finds nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard

import trainguard

TARGET = 12
MICRO = 2
SAMPLES = 480  # 40 steps an epoch
EVERY = 5


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), **fields}), flush=True)


def build(mesh: Any) -> dict[str, Any]:
    torch.manual_seed(
        0
    )  # the same parameters in every process and every run (replaced after the first round)
    model = torch.nn.Sequential(torch.nn.Linear(16, 30), torch.nn.ReLU(), torch.nn.Linear(30, 5))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)}


def main() -> None:
    data = torch.Generator().manual_seed(1)
    inputs = torch.randn(SAMPLES, 16, generator=data)
    targets = (inputs @ torch.randn(16, 5, generator=data)).tanh() + 0.1 * torch.randn(
        SAMPLES, 5, generator=data
    )
    batch = trainguard.GlobalBatch(TARGET, micro_max=MICRO, worlds=range(1, 5))
    sampler = trainguard.ElasticSampler(SAMPLES, shuffle=True, seed=7, rank=0, world_size=1)
    steps, delay = int(os.environ.get("SHARDED_STEPS", "100000")), float(os.environ.get("SHARDED_DELAY", "0"))

    def restore() -> tuple[int, str] | None:
        emit("restore", round=live.round)
        if os.environ.get("SHARDED_RESTORE") == "initial" and live.round > 1:
            return 0, "disk"
        return None

    live = trainguard.Live({"sampler": sampler}, build=build, restore=restore, timeout=10)
    emit("ready", member=live.member)
    go = os.environ.get("SHARDED_GO")
    while go and not os.path.exists(go):
        time.sleep(0.02)

    def train(live: trainguard.Live) -> None:
        emit("formed", warmup_seconds=live.warmup_seconds, **live.formations[-1].as_dict())
        model, optimizer = live.state["model"], live.state["optimizer"]
        plan = batch.plan(live.world_size)
        sampler.set_world(live.rank, live.world_size)
        while live.step < steps:
            step = live.step
            epoch, position = divmod(step * TARGET, SAMPLES)
            sampler.seek(epoch, position)
            mine = list(itertools.islice(iter(sampler), plan.per_rank))
            optimizer.zero_grad()
            for first in range(0, plan.per_rank, plan.micro):
                part = mine[first : first + plan.micro]
                # Each micro-batch's mean over the rank's accumulation; FSDP2 averages over the ranks.
                (F.mse_loss(model(inputs[part]), targets[part]) / plan.accumulation).backward()
            optimizer.step()
            whole = None
            if (step + 1) % EVERY == 0:  # a collective: every rank, before the step's end
                whole = torch.cat([p.full_tensor().detach().flatten() for p in model.parameters()])
            live.advance()  # the step is kept (its shards' copies at their buddies) once this returns
            shards = b"".join(p.to_local().detach().numpy().tobytes() for p in model.parameters())
            fields: dict[str, object] = {"step": live.step, "rank": live.rank, "world": live.world_size,
                                         "micro": plan.micro, "accumulation": plan.accumulation,
                                         "shard": hashlib.sha256(shards).hexdigest()}  # fmt: skip
            if whole is not None and live.rank == 0:
                fields["params"] = whole.tolist()
                fields["hash"] = hashlib.sha256(whole.numpy().tobytes()).hexdigest()
            if live.sharded is not None:
                fields["copies"], fields["copy_s"] = live.sharded.copies, live.sharded.copy_seconds
                fields["pack_s"] = live.sharded.pack_seconds
            emit("step", **fields)
            if delay:
                time.sleep(delay)
        emit("done", step=live.step)

    live.run(train)


if __name__ == "__main__":
    sys.exit(main())
