"""Hang detection latency per signal at two timeouts, and the agent's overhead on a healthy training run.

Latency: a job makes progress (heartbeats, output or CPU use, each alone), then stalls at a moment it
records; the latency is the agent's ``hang`` report time minus that moment. trainguard's bound is the timeout
plus 2 s. Overhead: the same small torch training loop, alternately bare and under the agent (relaying its
output, watching heartbeats, log and CPU), in one run; steps per second of each.

    python benchmarks/hang.py [--trials 3] [--timeouts 1,3] [--seconds 6]

The last line printed is one JSON object of the figures.
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
from pathlib import Path

#: Each workload makes progress by one signal only, for a second, then writes the time it stalled and
#: stops without exiting (sleeping: no output, no CPU, no heartbeat).
WORKLOADS = {
    "heartbeat": """
        import sys, time, trainguard
        end = time.time() + 1.0
        step = 0
        while time.time() < end:
            step += 1
            trainguard.heartbeat(step=step)
            time.sleep(0.05)
        open(sys.argv[1], "w").write(repr(time.time()))
        time.sleep(3600)
    """,
    "log": """
        import sys, time
        end = time.time() + 1.0
        while time.time() < end:
            print("working", flush=True)
            time.sleep(0.05)
        open(sys.argv[1], "w").write(repr(time.time()))
        time.sleep(3600)
    """,
    "cpu": """
        import sys, time
        end = time.time() + 1.0
        while time.time() < end:
            pass
        open(sys.argv[1], "w").write(repr(time.time()))
        time.sleep(3600)
    """,
}

TRAINING = """
    import sys, time, torch, trainguard
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
    seconds, steps = float(sys.argv[1]), 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        steps += 1
        trainguard.heartbeat(step=steps)
        if steps % 50 == 0:
            print("step", steps, flush=True)
    print("RATE", steps / (time.perf_counter() - start), flush=True)
"""


def agent(options: list[str], report: Path) -> list[str]:
    return [sys.executable, "-m", "trainguard.agent", "--report", str(report), *options, "--"]


def latency(signal: str, timeout: float, workdir: Path) -> float:
    script, marker, report = workdir / f"{signal}.py", workdir / "stalled", workdir / "report.jsonl"
    script.write_text(textwrap.dedent(WORKLOADS[signal]))
    for path in (marker, report):
        path.unlink(missing_ok=True)
    options = ["--hang-timeout", str(timeout), "--signals", signal, "--max-consecutive", "0", "--grace", "0"]
    process = subprocess.Popen(
        [*agent(options, report), sys.executable, str(script), str(marker)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        process.wait(timeout=timeout + 30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    events = [json.loads(line) for line in report.read_text().splitlines() if line.strip()]
    hang = next(event for event in events if event["event"] == "hang")
    return float(hang["time"]) - float(marker.read_text())


def training_rate(seconds: float, under_agent: bool, workdir: Path) -> float:
    script = workdir / "train.py"
    script.write_text(textwrap.dedent(TRAINING))
    command = [sys.executable, str(script), str(seconds)]
    if under_agent:
        # A healthy job with every signal watched: the agent relays output and reads heartbeats and CPU.
        command = [*agent(["--hang-timeout", "600"], workdir / "train-report.jsonl"), *command]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout
    return float(next(line.split()[1] for line in out.splitlines() if line.startswith("RATE")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--timeouts", default="1,3", help="comma-separated hang timeouts in seconds")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of each training run")
    args = parser.parse_args()
    timeouts = [float(text) for text in args.timeouts.split(",")]
    figures: dict[str, object] = {"trials": args.trials}
    with tempfile.TemporaryDirectory(prefix="trainguard-hang-bench-") as tmp:
        workdir = Path(tmp)
        detection: dict[str, dict[str, float]] = {}
        for signal in WORKLOADS:
            for timeout in timeouts:
                samples = [latency(signal, timeout, workdir) for _ in range(args.trials)]
                detection[f"{signal}@{timeout:g}s"] = {
                    "median_s": round(statistics.median(samples), 3),
                    "max_s": round(max(samples), 3),
                    "bound_s": timeout + 2.0,
                }
                print(
                    f"{signal:9} timeout {timeout:g} s: detected after {statistics.median(samples):.2f} s (median)"
                )
        figures["detection"] = detection
        bare, supervised = [], []
        for _ in range(args.trials):  # alternate, so that drift in the machine's load hits both alike
            bare.append(training_rate(args.seconds, False, workdir))
            supervised.append(training_rate(args.seconds, True, workdir))
        figures["steps_per_s_bare"] = round(statistics.median(bare), 1)
        figures["steps_per_s_agent"] = round(statistics.median(supervised), 1)
        figures["agent_overhead"] = round(1 - statistics.median(supervised) / statistics.median(bare), 4)
        print(
            f"training: {figures['steps_per_s_bare']} steps/s bare, {figures['steps_per_s_agent']} under the "
            f"agent (overhead {100 * float(str(figures['agent_overhead'])):.1f}%)"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
