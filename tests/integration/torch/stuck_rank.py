"""A gloo allreduce loop with heartbeats in which one pod's rank stops calling allreduce (once).

Every rank runs ``--steps`` allreduce steps and heartbeats after each. In the pod named ``--stuck-pod``, the
first time step ``--stuck-at`` is reached the rank writes ``--marker`` (the time it stopped) and sleeps: it is
alive, holds its connections, and never calls allreduce again, so its peers block in theirs. Rank 0 appends
JSON progress lines to ``--events``.
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

import trainguard

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--stuck-pod", required=True)
parser.add_argument("--stuck-at", type=int, required=True)
parser.add_argument("--marker", required=True)
parser.add_argument("--events", required=True)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


def event(name: str, **fields: object) -> None:
    if rank == 0:
        with open(args.events, "a") as handle:
            handle.write(json.dumps({"t": time.time(), "event": name, "world": world, **fields}) + "\n")


event("start", step=0)
marker = Path(args.marker)
for step in range(1, args.steps + 1):
    if (
        os.environ.get("TRAININGJOB_POD_NAME") == args.stuck_pod
        and step == args.stuck_at
        and not marker.exists()
    ):
        marker.write_text(str(time.time()))
        time.sleep(3600)
    total = torch.ones(4)
    dist.all_reduce(total)
    trainguard.heartbeat(step=step)
    event("step", step=step)
    time.sleep(0.1)
event("done", step=args.steps, accuracy=1.0)
dist.destroy_process_group()
