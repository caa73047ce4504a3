"""Elastic data-parallel training with nothing but torch: what a stock PyTorch image runs unchanged.

Every worker runs it under torchrun's elastic agent (which trainguard starts in each pod); it needs no
trainguard inside the image. It trains a small linear model with DistributedDataParallel on gloo, on
synthetic data made from a fixed seed, and rank 0 prints one line a step:

    step 12/40 world 3 loss 0.8123 restart 0

``world`` is the number of workers in the current rendezvous round, ``restart`` torchrun's restart count
(how many times the workers were restarted into a new round: a fault, or a resize). A new round starts the
steps again from 1; the job's logs show every round.

Every rank also sends trainguard's agent a heartbeat per step, where trainguard is importable: the operator
delivers its SDK into the pod with the agent, so a stock image needs nothing for it; elsewhere the script
trains the same without it. With heartbeats the agent tells a rank that stopped making progress from one that
is merely quiet (hang detection, restart in place).

With ``--live`` (trainguard importable, and the job annotated ``trainguard.io/live: "true"``) the workers run in
live mode (``trainguard.Live``): a fault or a resize does not restart the survivors, they re-form their group
in their processes and go on from the step they reached; a replacement receives the state from one of them.
Each worker prints one line per round: ``live rank 1 round 2 world 2 step 17 from live pid 42``.

With ``--snapshots`` (and trainguard importable) every step is kept in the pod's shared memory and on a peer
(``trainguard.Snapshots``), and a new round resumes from the newest step every rank can reach instead of step
1; each rank prints where it resumed from: ``rank 1 resumed at step 57 from peer``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

try:  # trainguard's SDK, where the operator delivered it; optional
    import trainguard
    from trainguard import heartbeat
except ImportError:
    trainguard = None  # type: ignore[assignment]

    def heartbeat(step: int | None = None, **metrics: float) -> None:
        """Without trainguard, nothing to tell."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40, help="steps to train (40)")
    parser.add_argument("--step-seconds", type=float, default=0.25, help="pause after each step (0.25)")
    parser.add_argument(
        "--snapshots", action="store_true", help="resume a new round from memory (trainguard.Snapshots)"
    )
    parser.add_argument(
        "--live", action="store_true", help="survivors keep training through faults (trainguard.Live)"
    )
    args = parser.parse_args()
    if args.live:
        if trainguard is None:
            sys.exit("train_elastic.py --live: trainguard is not importable here (the operator delivers it)")
        train_live(args)
        return
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    torch.manual_seed(rank)
    model = DistributedDataParallel(torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    snapshots, first = None, 1
    if args.snapshots and trainguard is not None:
        try:
            snapshots = trainguard.Snapshots(
                trainguard.Checkpointer(f"/tmp/checkpoints-{rank}"), optimizers=[optimizer]
            )
        except ValueError as error:  # no identity for the run (plain torchrun without --rdzv-id)
            sys.exit(f"train_elastic.py --snapshots: {error}")
        restored = snapshots.restore(
            like={"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}
        )
        if restored is not None:
            model.module.load_state_dict(restored.state["model"])
            optimizer.load_state_dict(restored.state["optimizer"])
            first = restored.step + 1
            print(f"rank {rank} resumed at step {restored.step} from {restored.source}", flush=True)
    for step in range(first, args.steps + 1):
        inputs = torch.randn(32, 16)
        loss = torch.nn.functional.mse_loss(model(inputs), inputs.sum(dim=1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if snapshots is not None:
            snapshots.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, step)
        heartbeat(step=step, loss=loss.item())
        if rank == 0:
            print(
                f"step {step}/{args.steps} world {world} loss {loss.item():.4f} restart {restart}", flush=True
            )
        time.sleep(args.step_seconds)
    dist.destroy_process_group()


def train_live(args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
    live = trainguard.Live({"model": model, "optimizer": optimizer})

    def train(live: trainguard.Live) -> None:
        formed = live.formations[-1]
        print(f"live rank {live.rank} round {formed.round} world {live.world_size} step {live.step} "
              f"from {formed.origin} pid {os.getpid()}", flush=True)  # fmt: skip
        ddp = DistributedDataParallel(model, init_sync=False)
        for step in live.steps(args.steps):
            inputs = torch.randn(32, 16)
            loss = torch.nn.functional.mse_loss(ddp(inputs), inputs.sum(dim=1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            heartbeat(step=step + 1, loss=loss.item())
            if live.rank == 0:
                print(f"step {step + 1}/{args.steps} world {live.world_size} loss {loss.item():.4f} "
                      f"restart {formed.round - 1}", flush=True)  # fmt: skip
            time.sleep(args.step_seconds)

    live.run(train)


if __name__ == "__main__":
    main()
