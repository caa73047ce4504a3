"""Steps lost, and time to the next step, at each kind of fault: memory snapshots against disk checkpoints.

    python benchmarks/steps_lost.py [--quick] [--random-trials 10]

Example 1 (examples/digits/train_digits.py, DDP on gloo, 3 workers, paced at ~0.05 s a step) runs on the local
runtime, and each fault is injected in turn on one job, once training has gone 10 steps past the previous
one:

- ``kill``: one pod's command (its torchrun and worker) SIGKILLed (``trainguard chaos kill``; relaunched);
- ``force_delete``: a pod force-deleted (replaced);
- ``node_down``: a node lost with its pod, and its memory (``trainguard chaos node-down``);
- ``scale_in``: 3 -> 2 workers; ``scale_out``: 2 -> 3;
- ``random_kill``: a worker killed at a random moment, ``--random-trials`` times.

Set-ups: ``disk``, trainguard with a disk checkpoint every 10 steps (and on SIGTERM); ``memory``, trainguard
with ``--snapshots`` (every step in shared memory and on a buddy, every 10th persisted). For each fault: the
steps lost (completed before the restart and done again) and the seconds from the fault to the next completed
step. Then, for a model of >= 100 M parameters (``--big-params``), the time of one training step against the
time ``Snapshots.save`` adds to it, and the shared memory the snapshots hold (peak extra memory).

``--quick``: the ``memory`` set-up only, one trial of each fault, the big model at 100 M; under 5 minutes.
The last line is one JSON object: per set-up and fault, ``steps_lost`` (the most over its trials) and
``seconds`` (the median); ``max_steps_lost`` over every trial of ``memory``; ``overhead`` of the big model.
Plain torchrun with a disk checkpoint (the issue's baseline (a)) is not measured here yet: its figures are
null.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trainguard.demo.session import Session, digits_job, recovery

EVERY = 10
STEP_DELAY = 0.05
TIMEOUT = 150.0
FAULTS = ("kill", "force_delete", "node_down", "scale_in", "scale_out", "random_kill")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--random-trials", type=int, default=10)
    parser.add_argument("--big-params", type=int, default=100_000_000)
    args = parser.parse_args()
    setups = ("memory",) if args.quick else ("disk", "memory")
    trials = 1 if args.quick else args.random_trials
    results: dict[str, Any] = {"torchrun_disk": None}
    for setup in setups:
        results[setup] = run_faults(setup, trials)
    memory = results["memory"]
    lost = [n for fault in FAULTS for n in memory[fault]["all_steps_lost"] if n is not None]
    results["max_steps_lost"] = max(lost) if lost else None
    results["overhead"] = overhead(args.big_params)
    for setup in setups:
        for fault in FAULTS:
            results[setup][fault].pop("all_steps_lost")
    print(json.dumps(results))
    return 0


def run_faults(setup: str, random_trials: int) -> dict[str, Any]:
    figures: dict[str, list[tuple[int | None, float | None]]] = {fault: [] for fault in FAULTS}
    extra = ("--snapshots",) if setup == "memory" else ()
    with tempfile.TemporaryDirectory() as root, Session(Path(root)) as session:
        spec = digits_job("steps", session.root, epochs=40, step_delay=STEP_DELAY, checkpoint_every=EVERY,
                          extra_args=extra)  # fmt: skip
        job = session.submit(spec)
        _wait_step(session, job, 10)
        for fault in FAULTS:
            for _ in range(random_trials if fault == "random_kill" else 1):
                figures[fault].append(_one(session, job, fault))
                print(f"{setup} {fault}: steps lost {figures[fault][-1][0]}, {figures[fault][-1][1]} s",
                      file=sys.stderr, flush=True)  # fmt: skip
        session.call("delete", job=job)
    return {
        fault: {
            "steps_lost": max((n for n, _ in got if n is not None), default=None),
            "seconds": statistics.median([s for _, s in got if s is not None])
            if any(s for _, s in got)
            else None,
            "all_steps_lost": [n for n, _ in got],
        }
        for fault, got in figures.items()
    }


def _one(session: Session, job: str, fault: str) -> tuple[int | None, float | None]:
    _wait_step(session, job, _last_step(session, job) + 10)
    pods = session.pods(job)
    world = None
    node = ""
    if fault == "random_kill":
        time.sleep(random.uniform(0, 1.0))
    if fault in ("kill", "random_kill"):
        session.chaos("kill", sorted(pods)[-1])
    elif fault == "force_delete":
        session.chaos("force-delete", sorted(pods)[-1])
    elif fault == "node_down":
        node = pods[sorted(pods)[-1]]["node"]
        session.chaos("node-down", node)
    elif fault == "scale_in":
        session.scale(job, "worker", 2)
        world = 2
    elif fault == "scale_out":
        session.scale(job, "worker", 3)
        world = 3
    at = time.time()
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        found = recovery(session.run(job).events(), at, world=world)
        if found is not None:
            if fault == "node_down":
                session.chaos("node-up", node)
            return found.steps_lost, round(found.next_step_at - at, 2)
        time.sleep(0.2)
    return None, None


def _last_step(session: Session, job: str) -> int:
    last = session.run(job).last_step()
    return last.step if last is not None else 0


def _wait_step(session: Session, job: str, step: int) -> int:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if _last_step(session, job) >= step:
            return step
        time.sleep(0.2)
    raise SystemExit(f"step {step} not reached in {TIMEOUT} s")


def overhead(params: int, steps: int = 8) -> dict[str, Any]:
    """One process, a model of ``params`` parameters (SGD with momentum: twice that in state): the median
    seconds of a whole training step without snapshots and with one per step (``optimizers=[optimizer]``: the
    copy of parameters and momentum overlaps the next forward and backward), their ratio, and the shared memory
    the snapshots hold (the peak extra memory: two slots)."""
    import torch

    import trainguard
    from trainguard.sdk import _shm

    width = 4096
    layers = max(1, round(params / (width * width)))
    model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batch = torch.randn(32, width)

    def timed(snapshots: Any) -> list[float]:
        took = []
        for step in range(1, steps + 1):
            started = time.perf_counter()
            model(batch).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            if snapshots is not None:
                snapshots.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, step)
            took.append(time.perf_counter() - started)
        return took[2:]  # the first two fill the optimizer's state and the two slots' pages

    plain = timed(None)
    with tempfile.TemporaryDirectory(dir="/dev/shm") as memory, tempfile.TemporaryDirectory() as disk:
        snapshots = trainguard.Snapshots(
            trainguard.Checkpointer(disk), directory=memory, optimizers=[optimizer]
        )
        snapshotted = timed(snapshots)
        snapshots.wait()
        held = _shm.tree_size(Path(memory))
        snapshots.close()
    plain_s, with_s = statistics.median(plain), statistics.median(snapshotted)
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "step_s": round(plain_s, 4),
        "step_with_snapshot_s": round(with_s, 4),
        "overhead_fraction": round((with_s - plain_s) / plain_s, 4),
        "shared_memory_mb": held >> 20,
    }


if __name__ == "__main__":
    sys.exit(main())
