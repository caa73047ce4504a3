"""A rank of a real gloo job (run by torchrun) that saves per-step snapshots, or restores from them.

``train BASE STEPS MODE``: each rank ``r`` acts as a node of its own (shared memory ``BASE/node-r``), takes
STEPS steps of a small DDP model, snapshots each, waits until the last is safe (a shard: on its buddy), writes
what it saved to ``BASE/saved-r.pt`` and ends. ``restore BASE MODE``: restores, and writes ``BASE/restored-r.json`` (step,
source, plan, and whether the state equals what the rank that held it saved). MODE: ``replicated`` (DDP: every
rank holds the same state), ``in-place`` (replicated, ``in_place=True``: the optimizer's tensors in shared
memory; each rank trains on its own inputs, so only DDP's averaging keeps them equal; rank 1 then SIGKILLs
itself inside its next optimizer step, between two parameter updates: ``KillInsideStep``) or ``sharded`` (each
rank its own part)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

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
    # One parameter updated after the other (``param.add_``), not all at once: a kill can fall between two.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=False)
    in_place = mode == "in-place"
    snapshots = trainguard.Snapshots(
        checkpointer, directory=base / f"node-{rank}", replicated=mode != "sharded",
        optimizers=[optimizer] if in_place else (), in_place=in_place,
        run_id=base.name,  # torchrun --standalone draws a new run id each time: one run is both invocations
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
        if in_place and rank == 1:  # the next step, on this rank alone: its gradients not averaged (no_sync)
            torch.manual_seed(1000)
            with model.no_sync():
                model(torch.randn(8, 16)).sum().backward()
            with KillInsideStep(optimizer, base / f"killed-{rank}.json"):
                optimizer.step()
            raise AssertionError("the optimizer step ended: the kill inside it did not happen")
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


def checksum(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


class KillInsideStep(TorchFunctionMode):
    """Active around one ``optimizer.step()``: the first in-place update of one of the optimizer's parameters
    goes through, then this process SIGKILLs itself, before the other parameters are updated. First it writes
    ``marker``: which parameter, its checksum before and after the update (the proof that the state in the
    process's memory was changed when it died)."""

    def __init__(self, optimizer: torch.optim.Optimizer, marker: Path) -> None:
        super().__init__()
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        self.parameters = {id(p): index for index, p in enumerate(parameters)}
        self.marker = marker

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        target = args[0] if args else None
        updates = name.endswith("_") and not name.startswith("_") and id(target) in self.parameters
        before = checksum(target) if updates else ""
        out = func(*args, **(kwargs or {}))
        if updates:
            record = {"parameter": self.parameters[id(target)], "update": name, "before": before,
                      "after": checksum(target), "of": len(self.parameters)}  # fmt: skip
            self.marker.write_text(json.dumps(record))
            os.kill(os.getpid(), signal.SIGKILL)
        return out


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
