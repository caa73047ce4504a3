"""Steps lost, and time to the next step, at each kind of fault: memory snapshots against disk checkpoints.

    python benchmarks/steps_lost.py [--quick] [--random-trials 10] [--fault-trials 1] [--models digits big]

Example 1 (examples/digits/train_digits.py, DDP on gloo, 3 workers) trains, as itself (``digits``, 9 k
parameters, paced at ~0.05 s a step) and as a synthetic model of 100 M parameters (``big``: ``--width 4096
--layers 7``). Each fault is injected in turn on one job, once training has gone 10 steps past the previous
recovery:

- ``kill``: one worker's command SIGKILLed (on trainguard, ``chaos kill``: the pod's torchrun and worker; the
  pod is relaunched);
- ``force_delete``: a pod force-deleted (replaced);
- ``node_down``: a node lost with its pod, and its memory (``trainguard chaos node-down``);
- ``scale_in``: 3 -> 2 workers; ``scale_out``: 2 -> 3;
- ``random_kill``: a worker killed at a random moment of a step, ``--random-trials`` times;
- ``silent`` (live mode only): every process of one pod SIGSTOPped (its agent, its launcher, its worker), as a
  node dropped off the network is silent; once measured it is continued, and rejoins.

Each of the other faults is injected ``--fault-trials`` times (default once).

Set-ups:

- ``torchrun_disk`` (a): plain ``torchrun --nproc-per-node 3`` with a disk checkpoint every 10 steps; it has no
  pods, nodes or resizes of its own, so only ``kill`` and ``random_kill`` (one training process SIGKILLed;
  torchrun restarts all) are measured, the others are null;
- ``disk`` (b): trainguard's local runtime, a disk checkpoint every 10 steps (and on SIGTERM); its backoff
  capped at 4 s (the faults come one after the other);
- ``memory`` (c): trainguard with ``--snapshots --in-place``: every step in shared memory (the parameters and
  the optimizer's state kept there; under DDP every other rank's copy is a replica), every 10th on disk;
- ``live`` (d): trainguard in live mode (``--live``, ``trainguard.io/live: "true"``): the survivors keep their
  processes and their state, a newcomer receives it from one of them. Per fault also ``origins`` (where rank 0's
  state came from at each resume: ``live``, ``peer``, ``memory``, ``disk``) and ``pids_kept`` (the training
  processes of the pods that lived through the fault, before and after: the same), both checked each trial.

Per set-up, model and fault: ``steps_lost`` (the most over its trials: steps completed before the restart and
done again after it), ``seconds`` (median, fault to the next completed step) and ``seconds_to_progress``
(median, fault to the first step past the one reached before it: later than ``seconds`` by the steps done
again). ``max_steps_lost``: the most
over every trial of ``memory``. ``overhead_job``: the per-step overhead of (c) against no checkpoint at all,
as the faults run (the 100 M model, 3 workers under torchrun, DDP over gloo). ``overhead``: one process, the
100 M model at a batch of 32, a whole step with a snapshot in place against one without, and the shared memory
held (the peak extra memory); ``overhead_copy``: the same with snapshots copied.

``overhead_by_batch``: the overhead's fraction at other batch sizes (the copy costs about the same whatever
the batch; the step grows with it). ``--quick``: ``memory`` on ``digits`` only, one trial of each fault, and the
overhead at a batch of 32; under 5 minutes, the same keys (the others null, ``overhead_by_batch`` empty);
``--overhead-job`` adds ``overhead_job`` to it (its median step leaves out the steps rank 0 also persists, one
in 10; its mean counts them). ``--results DIR`` keeps the JSON there with the commit and the machine. The last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
from _results import keep, machine

from trainguard.demo.session import DIGITS_SCRIPT, Run, Session, digits_job, recovery

EVERY = 10
TIMEOUT = 300.0
#: The benchmark's jobs wait at most this long before relaunching a pod that failed again (see trainguard_faults).
BACKOFF_MAX_SECONDS = 4
#: Long enough that no job ends before its faults are done (the digits model: 22 steps an epoch, 0.05 s each).
EPOCHS = 5000
#: Samples per step of the overhead's model (``--overhead-batches``: also measured at others).
BATCH = 32
FAULTS = ("kill", "force_delete", "node_down", "scale_in", "scale_out", "random_kill", "silent")
SETUPS = ("torchrun_disk", "disk", "memory", "live")
#: Set-up (c): a snapshot every step, the parameters and the optimizer's state kept in shared memory itself.
MEMORY_ARGS = ("--snapshots", "--in-place")
MODELS: dict[str, dict[str, Any]] = {
    "digits": {"args": (), "step_delay": 0.05},
    "big": {"args": ("--width=4096", "--layers=7"), "step_delay": 0.0},
}
#: Steps lost, seconds to the next step, seconds until a step past the one reached before the fault.
Figure = tuple[int | None, float | None, float | None]
#: What a cell holds: its summary's keys.
SUMMARY_KEYS = ("steps_lost", "seconds", "seconds_to_progress")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--random-trials", type=int, default=10)
    parser.add_argument("--fault-trials", type=int, default=1,
                        help="times each other fault is injected (its seconds: the median)")  # fmt: skip
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["digits", "big"])
    parser.add_argument("--setups", nargs="+", choices=SETUPS, default=list(SETUPS))
    parser.add_argument("--big-params", type=int, default=100_000_000, help="the overhead's model")
    parser.add_argument("--overhead-batches", type=int, nargs="*", default=[256, 1024],
                        help="batch sizes the overhead is also measured at (not with --quick)")  # fmt: skip
    parser.add_argument("--overhead-job", action="store_true", help="with --quick: the 3-worker overhead too")
    parser.add_argument(
        "--results", default=None, help="also keep the JSON in this directory (benchmarks/results)"
    )
    args = parser.parse_args()
    setups = ("memory", "live") if args.quick else tuple(args.setups)
    models = ("digits",) if args.quick else tuple(args.models)
    trials = (1, 1) if args.quick else (args.fault_trials, args.random_trials)
    results: dict[str, Any] = {}
    lost: list[int] = []
    for setup in SETUPS:
        results[setup] = {}
        for model in MODELS:
            if setup not in setups or model not in models:
                results[setup][model] = {fault: dict.fromkeys(SUMMARY_KEYS) for fault in FAULTS}
                continue
            runner = torchrun_faults if setup == "torchrun_disk" else trainguard_faults
            checks: dict[str, list[tuple[str | None, bool]]] = {fault: [] for fault in FAULTS}
            figures = runner(setup, model, trials, checks)
            if setup in ("memory", "live"):
                lost += [n for got in figures.values() for n, _, _ in got if n is not None]
            results[setup][model] = {fault: _summary(figures.get(fault, [])) for fault in FAULTS}
            if setup == "live":
                for fault, seen in checks.items():
                    results[setup][model][fault]["origins"] = [origin for origin, _ in seen]
                    results[setup][model][fault]["pids_kept"] = [kept for _, kept in seen]
    results["max_steps_lost"] = max(lost) if lost else None
    results["overhead_job"] = overhead_job(steps=20) if args.overhead_job or not args.quick else None
    results["overhead"] = overhead(args.big_params, BATCH)
    results["overhead_copy"] = overhead(args.big_params, BATCH, in_place=False)
    # The copy's cost is fixed by the state's size; the step's grows with the batch.
    batches = () if args.quick else args.overhead_batches
    results["overhead_by_batch"] = {
        str(batch): overhead(args.big_params, batch)["overhead_fraction"] for batch in batches
    }
    results["load_average"] = [round(load, 1) for load in os.getloadavg()]
    results["machine"] = machine()
    if args.results:
        keep("steps_lost-quick" if args.quick else "steps_lost", results, args.results)
    print(json.dumps(results))
    return 0


def _summary(got: list[Figure]) -> dict[str, Any]:
    seconds = [s for _, s, _ in got if s is not None]
    progress = [p for _, _, p in got if p is not None]
    return {
        "steps_lost": max((n for n, _, _ in got if n is not None), default=None),
        "seconds": round(statistics.median(seconds), 2) if seconds else None,
        "seconds_to_progress": round(statistics.median(progress), 2) if progress else None,
        "trials": len(got),
        "recovered": sum(1 for n, _, _ in got if n is not None),
    }


def _say(setup: str, model: str, fault: str, figure: Figure) -> None:
    print(f"{setup} {model} {fault}: steps lost {figure[0]}, {figure[1]} s to the next step, {figure[2]} s to a "
          "step past the one reached", file=sys.stderr, flush=True)  # fmt: skip


# ---- trainguard (b, c) ---------------------------------------------------------------------------------------


def trainguard_faults(
    setup: str, model: str, trials: tuple[int, int], checks: dict[str, list[tuple[str | None, bool]]]
) -> dict[str, list[Figure]]:
    figures: dict[str, list[Figure]] = {fault: [] for fault in FAULTS}
    extra = (*MODELS[model]["args"], *(MEMORY_ARGS if setup == "memory" else ()))
    live = setup == "live"
    with tempfile.TemporaryDirectory() as root, Session(Path(root)) as session:
        spec = digits_job("steps", session.root, epochs=EPOCHS, step_delay=MODELS[model]["step_delay"],
                          checkpoint_every=EVERY, extra_args=extra, live=live)  # fmt: skip
        # Fifteen faults in a few minutes, most on the same pod: with the default backoff (doubling up to 300 s
        # while the pod fails again within 10 minutes) the later ones would measure the wait, not the recovery.
        spec["spec"]["backoff"] = {"maxSeconds": BACKOFF_MAX_SECONDS}
        # Every fault costs each surviving pod's torchrun one of its restarts (the example allows 20): with
        # --fault-trials 5, the pod never chosen as the victim met 30 faults, and its torchrun gave up.
        spec["spec"]["elastic"]["maxRestarts"] = len(_sequence(trials)) + 10
        job = session.submit(spec)
        _wait_step(lambda: _last_step(session.run(job)), 10)
        for fault in _sequence(trials, silent=live):
            figures[fault].append(_one(session, job, fault, checks[fault] if live else None))
            _say(setup, model, fault, figures[fault][-1])
        session.call("delete", job=job)
    return figures


def _sequence(trials: tuple[int, int], silent: bool = False) -> list[str]:
    """The faults in the order injected: each fixed one ``trials[0]`` times (a scale-in and the scale-out back
    in turn), then ``trials[1]`` random kills; with ``silent`` (live mode), a silent pod ``trials[0]`` times."""
    fixed, random_kills = trials
    order = [fault for fault in ("kill", "force_delete", "node_down") for _ in range(fixed)]
    order += ["scale_in", "scale_out"] * fixed + ["random_kill"] * random_kills
    return order + ["silent"] * (fixed if silent else 0)


def _one(
    session: Session, job: str, fault: str, checks: list[tuple[str | None, bool]] | None = None
) -> Figure:
    """One fault and its figure; with ``checks`` (live mode) also where rank 0's state came from at the
    resume and whether the pods that lived through the fault kept their training processes."""
    run = session.run(job)
    # Every fault finds the job whole (3 workers; 2 before the scale-out), 10 steps on.
    _wait_world(run, 2 if fault == "scale_out" else 3)
    _wait_step(lambda: _last_step(run), _last_step(run) + 10)
    pods = {name: pod for name, pod in session.pods(job).items() if pod["phase"] == "Running"}
    victim = sorted(pods)[-1]
    # The pods that live through it: all but the victim (a scale-in removes the last pod, the same one).
    before = {pod: pids for pod, pids in session.worker_pids(job).items() if pod != victim}
    world = None
    if fault == "random_kill":
        time.sleep(random.uniform(0, _step_seconds(run)))
    if fault in ("kill", "random_kill"):
        session.chaos("kill", victim)
    elif fault == "force_delete":
        session.chaos("force-delete", victim)
    elif fault == "node_down":
        session.chaos("node-down", pods[victim]["node"])
    elif fault == "scale_in":
        session.scale(job, "worker", 2)
        world = 2
    elif fault == "scale_out":
        session.scale(job, "worker", 3)
        world = 3
    frozen: list[psutil.Process] = []
    if fault == "silent":  # the whole pod, its agent too: nothing of it says anything any more
        agent = psutil.Process(pods[victim]["pid"])
        frozen = [agent, *agent.children(recursive=True)]
        for process in frozen:
            process.suspend()
    at = time.time()
    try:
        figure = _recovered(run, at, world)
        if checks is not None:
            start = next((e for e in run.events() if e.event == "start" and e.t > at), None)
            after = session.worker_pids(job)
            kept = all(after.get(pod) == pids for pod, pids in before.items())
            checks.append((None if start is None else start.fields.get("source"), kept))
        return figure
    finally:
        if fault == "node_down":
            session.chaos("node-up", pods[victim]["node"])
        for process in frozen:  # continued: its worker finds its round left, and rejoins
            with contextlib.suppress(psutil.Error):
                process.resume()


# ---- plain torchrun (a) --------------------------------------------------------------------------------------


def torchrun_faults(
    setup: str, model: str, trials: tuple[int, int], _checks: dict[str, list[tuple[str | None, bool]]]
) -> dict[str, list[Figure]]:
    figures: dict[str, list[Figure]] = {"kill": [], "random_kill": []}
    with (
        tempfile.TemporaryDirectory() as root,
        _torchrun(Path(root), model, sum(trials) + 5) as (process, run),
    ):
        _wait_step(lambda: _last_step(run), 10)
        for fault in ["kill"] * trials[0] + ["random_kill"] * trials[1]:
            _wait_step(lambda: _last_step(run), _last_step(run) + 10)
            if fault == "random_kill":
                time.sleep(random.uniform(0, _step_seconds(run)))
            rank0 = [event for event in run.events() if event.event == "start"][-1].fields["pid"]
            victim = next(p for p in psutil.Process(process.pid).children() if p.pid != rank0 and _worker(p))
            victim.kill()
            figures[fault].append(_recovered(run, time.time(), None))
            _say(setup, model, fault, figures[fault][-1])
    return figures


@contextlib.contextmanager
def _torchrun(
    root: Path,
    model: str,
    max_restarts: int,
    extra: tuple[str, ...] = (f"--checkpoint-every={EVERY}",),
    threads: int | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], Run]]:
    """Example 1 under plain ``torchrun --nproc-per-node 3`` (its files under ``root``), killed on exit.
    ``threads``: each worker's (torchrun's default with several workers: 1)."""
    events = root / "events.jsonl"
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", "1", "--nproc-per-node", "3", "--max-restarts", str(max_restarts),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}",
        "--rdzv-id", f"steps-lost-{root.name}",  # the run whose memory snapshots these are
        str(DIGITS_SCRIPT), f"--checkpoint-dir={root / 'checkpoints'}", f"--events={events}",
        f"--step-delay={MODELS[model]['step_delay']}", f"--epochs={EPOCHS}", *MODELS[model]["args"], *extra,
    ]  # fmt: skip
    env = {
        **os.environ,
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "TRAINGUARD_SNAPSHOT_DIR": str(root / "shm"),
    }
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    with open(root / "torchrun.log", "wb") as log:
        process = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process, Run(events)
    finally:
        # torchrun starts each worker in a session of its own: killing torchrun's group would leave them
        # training on (they did, and slowed every later figure), so its children are killed by name first.
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(process.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def overhead_job(steps: int, rounds: int = 2, skip: int = 3) -> dict[str, Any]:
    """Set-up (c) against no checkpoint at all, as the faults run: the 100 M model, 3 workers under plain
    torchrun (DDP over gloo), each with torch's default threads as in a pod of the local runtime (one worker
    each), the median seconds between steps after the first ``skip`` of each run, runs of each kind in turn
    (``rounds`` each, ``steps`` steps a run). (c): a snapshot every step (every 10th also persisted to disk);
    the other: ``--checkpoint-every`` past the end, nothing saved."""
    kinds = {
        "none": (f"--checkpoint-every={10**9}",),
        "memory": (*MEMORY_ARGS, f"--checkpoint-every={EVERY}"),
    }
    gaps: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(rounds):  # in turn, so that a change in the machine's load falls on both
        for kind, extra in kinds.items():
            # The shared memory in /dev/shm, as the local runtime keeps it (the directory is removed after).
            with (
                tempfile.TemporaryDirectory(dir="/dev/shm") as root,
                _torchrun(Path(root), "big", 0, extra, os.cpu_count()) as (
                    _,
                    run,
                ),
            ):
                _wait_step(lambda: _last_step(run), skip + steps)
                times = [event.t for event in run.steps() if event.step > skip]
                gaps[kind] += [later - earlier for earlier, later in itertools.pairwise(times)]
    plain_s, with_s = statistics.median(gaps["none"]), statistics.median(gaps["memory"])
    # The median leaves out the steps that rank 0 also persists (one in EVERY); the mean counts them.
    plain_mean, with_mean = statistics.mean(gaps["none"]), statistics.mean(gaps["memory"])
    return {
        "workers": 3,
        "step_s": round(plain_s, 4),
        "step_with_snapshot_s": round(with_s, 4),
        "overhead_fraction": round((with_s - plain_s) / plain_s, 4),
        "step_mean_s": round(plain_mean, 4),
        "step_with_snapshot_mean_s": round(with_mean, 4),
        "overhead_mean_fraction": round((with_mean - plain_mean) / plain_mean, 4),
        "steps_measured": {kind: len(found) for kind, found in gaps.items()},
    }


def _worker(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return str(DIGITS_SCRIPT) in process.cmdline()
    return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ---- both ---------------------------------------------------------------------------------------------------


def _recovered(run: Run, at: float, world: int | None) -> Figure:
    """Steps lost, and seconds from ``at`` to the next completed step and to the first step past the one
    reached before the fault (the same step when none was lost; later by the steps done again)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        events = run.events()
        found = recovery(events, at, world=world)
        if found is not None:
            past = next(
                (
                    e.t
                    for e in events
                    if e.event == "step" and e.t >= found.next_step_at and e.step > found.step_before
                ),
                None,
            )
            if past is not None:
                return found.steps_lost, round(found.next_step_at - at, 2), round(past - at, 2)
        time.sleep(0.1)
    return None, None, None


def _wait_world(run: Run, world: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while (last := run.last_step()) is None or last.world != world:
        if time.monotonic() > deadline:
            raise SystemExit(f"no step in a world of {world} within {TIMEOUT} s")
        time.sleep(0.1)


def _last_step(run: Run) -> int:
    last = run.last_step()
    return last.step if last is not None else 0


def _step_seconds(run: Run) -> float:
    steps = run.steps()[-6:]
    return (steps[-1].t - steps[0].t) / (len(steps) - 1) if len(steps) > 1 else 0.1


def _wait_step(last: Callable[[], int], step: int) -> None:
    deadline = time.monotonic() + TIMEOUT
    while last() < step:
        if time.monotonic() > deadline:
            raise SystemExit(f"step {step} not reached in {TIMEOUT} s")
        time.sleep(0.1)


def overhead(params: int, batch_size: int, in_place: bool = True, steps: int = 8) -> dict[str, Any]:
    """One process, a model of ``params`` parameters (SGD with momentum: twice that in state): the median
    seconds of a whole training step without snapshots and with one per step, their ratio, and the shared memory
    the snapshots hold. ``in_place`` (set-up (c)): the parameters and momentum live in shared memory, a snapshot
    copies the rest (nothing here) and commits; else (``optimizers=[optimizer]``): their copy overlaps the next
    forward and backward, into one of two slots."""
    import torch

    import trainguard
    from trainguard.sdk import _shm

    width = 4096
    layers = max(1, round(params / (width * width)))
    batch = torch.randn(batch_size, width)

    def trainer() -> tuple[Any, Any]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*(torch.nn.Linear(width, width) for _ in range(layers)))
        return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    # Two copies of the model: one never snapshotted, in the process's own memory; the other snapshotted (in
    # place, its parameters and momentum move into shared memory at its first save: what training on them there
    # costs is part of the overhead).
    plain_model, plain_optimizer = trainer()
    model, optimizer = trainer()

    def timed(model: Any, optimizer: Any, snapshots: Any) -> list[float]:
        took = []
        for step in range(1, steps + 1):
            started = time.perf_counter()
            model(batch).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            if snapshots is not None:
                snapshots.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, step)
            took.append(time.perf_counter() - started)
        return took[2:]  # the first two: the optimizer's state, the slots' pages, a change of mode

    plain: list[float] = []
    snapshotted: list[float] = []
    with tempfile.TemporaryDirectory(dir="/dev/shm") as memory, tempfile.TemporaryDirectory() as disk:
        snapshots = trainguard.Snapshots(
            trainguard.Checkpointer(disk),
            directory=memory,
            optimizers=[optimizer],
            in_place=in_place,
            run_id="overhead",
        )
        for _ in range(2):  # in turn, so that a change in the machine's load falls on both
            plain += timed(plain_model, plain_optimizer, None)
            snapshotted += timed(model, optimizer, snapshots)
            snapshots.wait()
        held = _shm.tree_size(Path(memory))
        snapshots.close()
    plain_s, with_s = statistics.median(plain), statistics.median(snapshotted)
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "batch": batch_size,
        "in_place": in_place,
        "step_s": round(plain_s, 4),
        "step_with_snapshot_s": round(with_s, 4),
        "overhead_fraction": round((with_s - plain_s) / plain_s, 4),
        "shared_memory_mb": held >> 20,
    }


if __name__ == "__main__":
    sys.exit(main())
