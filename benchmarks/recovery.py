"""Recovery from a killed worker: plain torchrun against trainguard, on the same script, in one run.

    python benchmarks/recovery.py [--trials 3] [--workers 2 3] [--kill-at 35]

Each trial trains example 1 (examples/digits/train_digits.py: DDP on gloo, 2 or 3 workers, a checkpoint every
10 steps, paced at ~0.05 s a step) and SIGKILLs one training process (not rank 0) once step ``--kill-at`` is
done, then measures from rank 0's progress log:

- recovery time: from the kill to the first step completed after the workers restarted;
- steps lost: steps completed before the restart and done again after it;
- whether the trial recovered at all (a step within ``--timeout`` seconds).

Set-ups, each ``--trials`` times:

- ``torchrun``: plain ``torchrun --nnodes 1 --nproc-per-node N --max-restarts 3`` (c10d, as torchrun's docs run it);
- ``torchrun_fixed``: the same with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, the fix trainguard applies;
- ``trainguard``: the job on the local runtime, N pods of one worker each, the worker of pod 1 killed;
- ``trainguard_live``: the same job in live mode (``--live``, ``trainguard.io/live: "true"``): the survivors
  keep their processes (checked: their pids before and after) and re-form without the killed worker;
- ``trainguard_live_spare``: the same live job with one hot spare per pod (``trainguard.io/live-spares: "1"``):
  the killed worker's place is taken by its pod's spare, warm, instead of a process started cold. Besides the
  survivors' next step, every live set-up reports ``whole_s``: from the kill to the first step of the whole
  world again (the replacement, or the spare, trained a step);
- ``trainguard_live_silent``: the same live job, and instead of a kill every process of pod 1 (its agent, its
  launcher, its worker) SIGSTOPped: a pod gone silent, as a node dropped off the network is (no connection is
  reset). Recovery time: from the stop to the survivors' next step.

The last line of the output is one JSON object with every figure, per number of workers; ``ratio`` is
trainguard's median recovery time over plain torchrun's, over the trials where torchrun recovered (null when
it never did), ``ratio_fixed`` the same against ``torchrun_fixed``. ``target_met``: trainguard recovered in
every trial, and ``ratio`` (where there is one) is at most 0.5. ``ratio_live_fixed`` is live mode's median over
``torchrun_fixed``'s; ``target_live_met``: live mode recovered in every trial with the survivors' pids kept,
0 steps lost, and ``ratio_live_fixed`` at most 0.1. ``target_spare_met``: with a spare, the world whole
again within 1 s of the kill and the survivors' next step within 0.5 s, in every trial, 0 steps lost.
``target_silent_met``: the silent pod's survivors
recovered in every trial within 3 s, their pids kept, 0 steps lost.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
from _results import keep, machine

from trainguard.agent.nudge import workers
from trainguard.demo.session import DIGITS_SCRIPT, Run, Session, digits_job, recovery
from trainguard.pod.livelaunch import started_as_spare

SETUPS = (
    "torchrun",
    "torchrun_fixed",
    "trainguard",
    "trainguard_live",
    "trainguard_live_spare",
    "trainguard_live_silent",
)
EVERY = 10
STEP_DELAY = 0.05
EPOCHS = 6


@dataclass(frozen=True)
class Trial:
    recovered: bool
    seconds: float | None
    steps_lost: int | None
    #: Live mode: the survivors' training processes are those of before the kill.
    pids_kept: bool | None = None
    #: Live mode: seconds from the kill to the first step of the whole world again; None where it was not.
    whole_seconds: float | None = None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 3], help="sizes to measure, each")
    parser.add_argument("--kill-at", type=int, default=35, help="kill once this step is done")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds after the kill to give up")
    parser.add_argument(
        "--setups",
        nargs="+",
        choices=SETUPS,
        default=list(SETUPS),
        help="the set-ups to run (default: all; e.g. trainguard_live trainguard_live_spare, a spare and its baseline)",
    )
    parser.add_argument(
        "--results", default=None, help="also keep the JSON in this directory (benchmarks/results)"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="trainguard-bench-recovery-"))
    figures: dict[str, object] = {
        "trials": args.trials,
        "setups": list(args.setups),
        "kill_at_step": args.kill_at,
        "checkpoint_every": EVERY,
    }
    try:
        for size in args.workers:
            results: dict[str, list[Trial]] = {setup: [] for setup in SETUPS}
            for trial in range(args.trials):
                for setup in args.setups:
                    directory = root / f"{size}-{setup}-{trial}"
                    if setup.startswith("trainguard"):
                        live = setup.startswith("trainguard_live")
                        silent = setup == "trainguard_live_silent"
                        spares = 1 if setup == "trainguard_live_spare" else 0
                        outcome = trainguard_trial(
                            directory,
                            size,
                            args.kill_at,
                            args.timeout,
                            live=live,
                            silent=silent,
                            spares=spares,
                        )
                    else:
                        fixed = setup == "torchrun_fixed"
                        outcome = torchrun_trial(directory, size, args.kill_at, args.timeout, fixed=fixed)
                    results[setup].append(outcome)
                    print(
                        f"{size} workers, trial {trial + 1}/{args.trials} {setup:15} {describe(outcome)}",
                        flush=True,
                    )
            figures[f"workers_{size}"] = summary(results)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sizes = [value for key, value in figures.items() if key.startswith("workers_")]
    figures["target_met"] = all(isinstance(size, dict) and size["target_met"] for size in sizes)
    figures["load_average"] = [round(load, 1) for load in os.getloadavg()]
    figures["machine"] = machine()
    if args.results:
        keep("recovery", figures, args.results)
    print(json.dumps(figures))
    return 0


def describe(trial: Trial) -> str:
    if not trial.recovered:
        return "did not recover"
    whole = "" if trial.whole_seconds is None else f", the world whole again in {trial.whole_seconds:.2f} s"
    return f"recovered in {trial.seconds:.2f} s, {trial.steps_lost} steps lost{whole}"


def summary(results: dict[str, list[Trial]]) -> dict[str, object]:
    figures: dict[str, object] = {}
    for setup, trials in results.items():
        times = [t.seconds for t in trials if t.recovered and t.seconds is not None]
        figures[setup] = {
            "recovered": sum(t.recovered for t in trials),
            "recovery_s": [None if t.seconds is None else round(t.seconds, 2) for t in trials],
            "median_recovery_s": round(statistics.median(times), 2) if times else None,
            "steps_lost": [t.steps_lost for t in trials],
            **({"pids_kept": [t.pids_kept for t in trials]} if setup.startswith("trainguard_live") else {}),
            **(
                {"whole_s": [None if t.whole_seconds is None else round(t.whole_seconds, 2) for t in trials]}
                if setup in ("trainguard_live", "trainguard_live_spare")
                else {}
            ),
        }
    ratio = _ratio(results["trainguard"], results["torchrun"])
    figures["ratio"] = ratio
    figures["ratio_fixed"] = _ratio(results["trainguard"], results["torchrun_fixed"])
    every = all(t.recovered for t in results["trainguard"])
    figures["target_met"] = every and (ratio is None or ratio <= 0.5)
    live = results["trainguard_live"]
    figures["ratio_live_fixed"] = _ratio(live, results["torchrun_fixed"])
    figures["target_live_met"] = (
        bool(live)
        and all(t.recovered and t.pids_kept and t.steps_lost == 0 for t in live)
        and figures["ratio_live_fixed"] is not None
        and figures["ratio_live_fixed"] <= 0.1
    )
    spare = results["trainguard_live_spare"]
    figures["target_spare_met"] = bool(spare) and all(
        t.recovered
        and t.pids_kept
        and t.steps_lost == 0
        and t.whole_seconds is not None
        and t.whole_seconds <= 1.0
        and t.seconds is not None
        and t.seconds <= 0.5
        for t in spare
    )
    silent = results["trainguard_live_silent"]
    figures["target_silent_met"] = bool(silent) and all(
        t.recovered and t.pids_kept and t.steps_lost == 0 and t.seconds is not None and t.seconds <= 3.0
        for t in silent
    )
    return figures


def _ratio(ours: list[Trial], theirs: list[Trial]) -> float | None:
    """Median recovery time of ``ours`` over that of ``theirs``, each over the trials that recovered."""
    mine = [t.seconds for t in ours if t.recovered and t.seconds is not None]
    other = [t.seconds for t in theirs if t.recovered and t.seconds is not None]
    return round(statistics.median(mine) / statistics.median(other), 2) if mine and other else None


# ---- plain torchrun ------------------------------------------------------------------------------------------


def torchrun_trial(directory: Path, size: int, kill_at: int, timeout: float, *, fixed: bool) -> Trial:
    directory.mkdir(parents=True)
    events = directory / "events.jsonl"
    env = dict(os.environ)
    env.pop("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", None)
    if fixed:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", "1", "--nproc-per-node", str(size), "--max-restarts", "3",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}",
        str(DIGITS_SCRIPT),
        f"--checkpoint-dir={directory / 'checkpoints'}", f"--checkpoint-every={EVERY}",
        f"--events={events}", f"--step-delay={STEP_DELAY}", f"--epochs={EPOCHS}",
    ]  # fmt: skip
    with open(directory / "torchrun.log", "wb") as log:
        process = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        run = Run(events)
        _wait(lambda: (last := run.last_step()) is not None and last.step >= kill_at, 300, process)
        rank0 = [event for event in run.events() if event.event == "start"][-1].fields["pid"]
        victim = next(p for p in psutil.Process(process.pid).children() if p.pid != rank0 and _is_worker(p))
        return _measure(run, victim.kill, timeout, process)
    finally:
        _kill_tree(process.pid)
        process.wait()


def _is_worker(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return str(DIGITS_SCRIPT) in process.cmdline()
    return False


# ---- trainguard -------------------------------------------------------------------------------------------


def trainguard_trial(
    directory: Path,
    size: int,
    kill_at: int,
    timeout: float,
    *,
    live: bool = False,
    silent: bool = False,
    spares: int = 0,
) -> Trial:
    with Session(directory) as session:
        spec = digits_job(
            "bench",
            session.root,
            replicas=size,
            epochs=EPOCHS,
            step_delay=STEP_DELAY,
            checkpoint_every=EVERY,
            live=live,
            spares=spares,
        )
        job = session.submit(spec)
        run = session.run(job)
        _wait(lambda: (last := run.last_step()) is not None and last.step >= kill_at, 300)
        agent = session.pods(job)[f"{job}-worker-1"]["pid"]
        [torchrun] = psutil.Process(agent).children()
        # The pod's worker that holds a rank (a spare is started with its pipe named in its environment), and
        # each spare warm and waiting before the kill.
        _wait(lambda: len(workers(torchrun.pid)) == 1 + spares, 120)
        [worker] = [w for w in workers(torchrun.pid) if not started_as_spare(w.pid)]
        victim = psutil.Process(worker.pid)
        before = {pod: pids for pod, pids in session.worker_pids(job).items() if pod != f"{job}-worker-1"}
        if silent:  # the whole pod, its agent too: nothing of it says anything any more
            pod = [psutil.Process(agent), *psutil.Process(agent).children(recursive=True)]
            trial = _measure(run, lambda: [p.suspend() for p in pod], timeout)
        else:
            trial = _measure(run, victim.kill, timeout, whole=size if live else None)
        if not live:
            return trial
        after = session.worker_pids(job)
        kept = all(after.get(pod) == pids for pod, pids in before.items())
        return Trial(trial.recovered, trial.seconds, trial.steps_lost, kept, trial.whole_seconds)


# ---- both ---------------------------------------------------------------------------------------------------


def _measure(
    run: Run,
    fault: Callable[[], object],
    timeout: float,
    process: subprocess.Popen[bytes] | None = None,
    whole: int | None = None,
) -> Trial:
    """The recovery from ``fault``: the first step after the workers' restart (or re-formation), and with
    ``whole`` (the world's size) the first step of the whole world again."""
    killed_at = time.time()
    fault()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = recovery(run.events(), killed_at)
        if found is not None and whole is not None:
            back = recovery(run.events(), killed_at, world=whole)
            if back is None:
                time.sleep(0.05)
                continue
            return Trial(True, found.seconds, found.steps_lost, whole_seconds=back.seconds)
        if found is not None:
            return Trial(True, found.seconds, found.steps_lost)
        if process is not None and process.poll() is not None:
            break  # torchrun gave up
        time.sleep(0.05)
    return Trial(False, None, None)


def _wait(condition: object, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"torchrun exited with {process.returncode} before the kill")
        if time.monotonic() > deadline:
            raise RuntimeError("training did not reach the kill step")
        time.sleep(0.05)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _kill_tree(pid: int) -> None:
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.send_signal(signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
