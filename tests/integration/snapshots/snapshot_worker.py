"""A rank of a real gloo job (run by torchrun) that saves per-step snapshots, or restores from them.

``train BASE STEPS MODE``: each rank ``r`` acts as a node of its own (shared memory ``BASE/node-r``), takes
STEPS steps of a small DDP model, snapshots each, waits until the last is safe (a shard: on its buddy), writes
what it saved to ``BASE/saved-r.pt`` and ends. ``restore BASE MODE``: restores, and writes ``BASE/restored-r.json`` (step,
source, plan, and whether the state equals what the rank that held it saved). MODE: ``replicated`` (DDP: every
rank holds the same state), ``in-place`` (replicated, ``in_place=True``: the optimizer's tensors in shared
memory; each rank trains on its own inputs, so only DDP's averaging keeps them equal; rank 1 is killed inside
its next optimizer step) or ``sharded`` (each rank its own part)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import trainguard


def main() -> None:
    action, base = sys.argv[1], Path(sys.argv[2])
    mode = sys.argv[-1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    os.environ["TRAINGUARD_NODE_NAME"] = f"node-{rank}"
    checkpointer = trainguard.Checkpointer(base / "disk")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    in_place = mode == "in-place"
    snapshots = trainguard.Snapshots(
        checkpointer, directory=base / f"node-{rank}", replicated=mode != "sharded",
        optimizers=[optimizer] if in_place else (), in_place=in_place,
    )  # fmt: skip

    def state(step: int) -> dict[str, object]:
        ours = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
        if mode == "sharded":
            ours["shard"] = torch.full((1000,), float(rank * 1000 + step))  # this rank's own part
        return ours

    if action == "train":
        for step in range(1, int(sys.argv[3]) + 1):
            torch.manual_seed(step * 10 + rank if in_place else step)
            model(torch.randn(8, 16)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            snapshots.save(state(step), step)
        assert snapshots.wait_safe(60), "the last snapshot never reached the buddy"
        torch.save(state(int(sys.argv[3])), base / f"saved-{rank}.pt")
        print(f"rank {rank}: buddy {snapshots.buddy_name}, safe step {snapshots.safe_step}", flush=True)
        dist.barrier()
        if in_place and rank == 1:
            optimizer.step()  # no gradients: it changes nothing, but rank 1 dies as if inside this step
        os._exit(0)  # as a killed worker: nothing closed, the memory stays
    restored = snapshots.restore()
    assert restored is not None
    shard = restored.plan.shards[rank]
    saved = torch.load(base / f"saved-{shard if mode == 'sharded' else 0}.pt")
    result = {
        "step": restored.step,
        "source": restored.source,
        "fetches": [[f.shard, f.source, list(f.to)] for f in restored.plan.fetches],
        "equal": _equal(restored.state, saved),
    }
    (base / f"restored-{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


def _equal(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=False))  # type: ignore[arg-type]
    return a == b


if __name__ == "__main__":
    main()
