"""Two gloo ranks under torchrun; on the first attempt rank 1 stops calling allreduce at step STUCK_AT.

Rank 0 is then blocked inside allreduce (gloo would wait 30 minutes), so neither rank heartbeats: a hang
the agent must see within its timeout. Later attempts run to the end and exit 0.
"""

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import trainguard

STEPS, STUCK_AT = 40, 10


def main() -> None:
    marker = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank, attempt = dist.get_rank(), int(os.environ.get("TRAINGUARD_ATTEMPT", "1"))
    for step in range(STEPS):
        if attempt == 1 and rank == 1 and step == STUCK_AT:
            with marker.open("a") as out:
                out.write(f"stuck {time.time()} {attempt}\n")
            while True:  # alive, but never calls allreduce again
                time.sleep(3600)
        value = torch.ones(1)
        dist.all_reduce(value)
        assert value.item() == dist.get_world_size()
        trainguard.heartbeat(step=step)
        time.sleep(0.02)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
