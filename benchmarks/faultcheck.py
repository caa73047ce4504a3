"""The fault tolerance check's cost: the pre-check's time per pod, and the periodic check's cost per step.

Pre-check: a pod's command starts after its agent checked the node. The time from starting the agent to the
command's first line, with the check and without it (the baseline, in the same run, alternately), per pod.
Bound: 10 s.

Periodic check: the same small training loop (a torch model on ``--device``, one thread on CPU) under the
agent, with periodic checks every ``--period`` seconds and without any (alternately): the steps per second of
each, and the check's cost as a share of a step at that period and at the default period (300 s), from the
cost of one check (the difference in time over the checks run). Bound: 0.5 % of a step at the default.

    python benchmarks/faultcheck.py [--trials 3] [--device cpu|cuda] [--seconds 20] [--period 2]

On a GPU machine ``--device cuda`` runs the GPU items (NVML) and a CUDA loop. The raw figures are kept under
``benchmarks/results/faultcheck-<time>.json`` (``_results.keep``); the last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import keep, machine

from trainguard.pod import contract
from trainguard.pod.checks import Settings

#: The periodic check's default period (``faultCheck.periodSeconds``).
DEFAULT_PERIOD = 300.0
STARTED = "import sys, time; print('STARTED', repr(time.time()), flush=True)"
TRAINING = """
    import sys, time, torch, trainguard
    device = sys.argv[2]
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 256, device=device), torch.randint(0, 10, (128,), device=device)
    seconds, steps = float(sys.argv[1]), 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if device != "cpu":
            torch.cuda.synchronize()
        steps += 1
        trainguard.heartbeat(step=steps)
    print("RATE", steps / (time.perf_counter() - start), flush=True)
"""


def _env(settings: Settings | None, workdir: Path) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", contract.ENV_NODE_NAME: "bench-node"}
    env.pop(contract.ENV_FAULT_CHECK, None)
    if settings is not None:
        env[contract.ENV_FAULT_CHECK] = settings.to_json()
        env[contract.ENV_FAULT_INJECT] = str(workdir / "no-injection")
    return env


def _agent(report: Path) -> list[str]:
    return [sys.executable, "-m", "trainguard.agent", "--report", str(report), "--"]


def pre_check_seconds(settings: Settings | None, workdir: Path) -> float:
    """From starting the agent to its command's first line."""
    report = workdir / "pre.jsonl"
    report.unlink(missing_ok=True)
    started = time.time()
    done = subprocess.run(
        [*_agent(report), sys.executable, "-c", STARTED],
        capture_output=True, text=True, env=_env(settings, workdir), timeout=120, check=False,
    )  # fmt: skip
    line = next((line for line in done.stdout.splitlines() if line.startswith("STARTED")), None)
    if line is None:
        raise RuntimeError(f"the command never started (exit {done.returncode}): {done.stderr[-2000:]}")
    return float(line.split()[1]) - started


def training_rate(
    settings: Settings | None, seconds: float, device: str, workdir: Path
) -> tuple[float, list[float]]:
    """Steps per second under the agent, and how long each check it ran meanwhile took."""
    script, report = workdir / "train.py", workdir / "train.jsonl"
    script.write_text(textwrap.dedent(TRAINING))
    report.unlink(missing_ok=True)
    out = subprocess.run(
        [*_agent(report), sys.executable, str(script), str(seconds), device],
        capture_output=True, text=True, env=_env(settings, workdir), timeout=seconds + 300, check=True,
    ).stdout  # fmt: skip
    rate = float(next(line.split()[1] for line in out.splitlines() if line.startswith("RATE")))
    events = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
    took = [
        float(event["check"]["seconds"]) for event in events if event.get("event") == contract.REPORT_CHECKED
    ]
    return rate, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each training run")
    parser.add_argument("--period", type=float, default=2.0, help="the periodic check's period in the runs")
    args = parser.parse_args()
    gpus = 1 if args.device.startswith("cuda") else 0
    with tempfile.TemporaryDirectory(prefix="trainguard-faultcheck-bench-") as tmp:
        workdir = Path(tmp)
        rendezvous = None  # nothing to reach: the item is skipped
        checked = Settings(period=0.0, gpus=gpus, disk={tmp: 1 << 20}, rendezvous=rendezvous)
        bare_start, checked_start = [], []
        for _ in range(args.trials):  # alternate, so that drift in the machine's load hits both alike
            bare_start.append(pre_check_seconds(None, workdir))
            checked_start.append(pre_check_seconds(checked, workdir))
        pre = statistics.median(checked_start) - statistics.median(bare_start)
        print(f"pre-check: the command starts {pre:.2f} s later ({statistics.median(checked_start):.2f} s "
              f"against {statistics.median(bare_start):.2f} s without the check)")  # fmt: skip
        periodic = Settings(period=args.period, gpus=gpus, disk={tmp: 1 << 20})
        bare, watched, durations = [], [], []
        for _ in range(args.trials):
            bare.append(training_rate(None, args.seconds, args.device, workdir)[0])
            rate, took = training_rate(periodic, args.seconds, args.device, workdir)
            watched.append(rate)
            durations += took[1:]  # the periodic ones (the first is the pre-check)
    rate_bare, rate_checked = statistics.median(bare), statistics.median(watched)
    slowdown = 1 - rate_checked / rate_bare
    # One check's cost, bounded from above by its whole duration (as if training stopped meanwhile; it runs in
    # the agent's thread beside the training), over the default period: the share of each step's time.
    per_check = statistics.median(durations) if durations else 0.0
    at_default = per_check / DEFAULT_PERIOD
    print(f"periodic check every {args.period:g} s: {rate_checked:.1f} steps/s against {rate_bare:.1f} without "
          f"({100 * slowdown:.2f} % slower, the machine's noise included); one check takes {per_check:.3f} s: "
          f"at most {100 * at_default:.4f} % of each step's time at the default period ({DEFAULT_PERIOD:g} s)")  # fmt: skip
    figures = {
        "device": args.device,
        "trials": args.trials,
        "pre_check_s": round(pre, 3),
        "start_without_check_s": round(statistics.median(bare_start), 3),
        "start_with_check_s": round(statistics.median(checked_start), 3),
        "pre_check_bound_s": 10.0,
        "period_s": args.period,
        "steps_per_s_without": round(rate_bare, 2),
        "steps_per_s_with": round(rate_checked, 2),
        "checks": len(durations),
        "slowdown_at_period": round(slowdown, 5),
        "check_cost_s": round(per_check, 4),
        "share_of_step_at_default_period": round(at_default, 6),
        "share_bound": 0.005,
    }
    keep("faultcheck", {**figures, "machine": machine(), "raw": {
        "start_without_check_s": bare_start, "start_with_check_s": checked_start,
        "steps_per_s_without": bare, "steps_per_s_with": watched, "check_seconds": durations}})  # fmt: skip
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
