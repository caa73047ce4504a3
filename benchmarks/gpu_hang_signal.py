"""What a GPU shows while a process computes, and while it waits in a collective: the observations the agent's
hang detector reads, recorded on a real card.

    PYTHONPATH=src python benchmarks/gpu_hang_signal.py [--seconds 4] [--out FILE]

A process waiting in a collective on a GPU (NCCL's kernel polling for its peer's data, the host thread in a
CUDA synchronize, which spins) uses a full core of CPU: the agent's CPU signal reads that as work. This script
runs, in one process, four phases and samples every ``--every`` s, through NVML (the driver's library, no
Python package needed):

- ``idle``: nothing on the device;
- ``compute``: matrix products back to back (training's shape);
- ``waiting``: one kernel that spins on the device's clock (``torch.cuda._sleep``: one thread of one block
  busy, as a collective's kernel polls for a peer that never sends), the host thread in a synchronize;
- ``host_blocked``: the host blocked outside CUDA (a gloo collective waiting on a stopped peer's socket).

Per sample: the device's utilization (the share of time a kernel ran), this process's (per-process samples),
the power draw over the card's limit, the SMs' activity (GPM, on cards that have it: Hopper and later), and the
process's CPU time since the previous sample. The last line is one JSON object: ``phases`` maps each to its
samples; ``trainguard.agent.gpu`` decides from them (tests replay the recorded file).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="each phase's length")
    parser.add_argument("--every", type=float, default=0.5, help="the sampling period, s")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parents[1] / "src"))
    import torch

    from trainguard.agent.gpu import Nvml

    if not torch.cuda.is_available():
        print("gpu_hang_signal: no CUDA device", file=sys.stderr)
        return 2
    torch.cuda.init()
    nvml = Nvml.load()
    pid = os.getpid()
    phases: dict[str, list[dict[str, Any]]] = {}

    def sample_while(name: str, work: Any) -> None:
        samples: list[dict[str, Any]] = []
        done = threading.Event()

        def sampler() -> None:
            nvml.sample(0, pid)  # primes the per-process and GPM windows
            last_cpu = _cpu()
            while not done.wait(args.every):
                cpu = _cpu()
                observed = nvml.sample(0, pid)
                samples.append(
                    {**observed.as_dict(), "cpu_s": round(cpu - last_cpu, 4), "period_s": args.every}
                )
                last_cpu = cpu

        thread = threading.Thread(target=sampler, daemon=True)
        thread.start()
        work()
        done.set()
        thread.join()
        phases[name] = samples

    a = torch.randn(8192, 8192, device="cuda")
    b = torch.randn(8192, 8192, device="cuda")

    def idle() -> None:
        time.sleep(args.seconds)

    def compute() -> None:
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            for _ in range(8):
                torch.mm(a, b)
            torch.cuda.synchronize()

    def waiting() -> None:
        cycles = int(torch.cuda.get_device_properties(0).clock_rate * 1000 * args.seconds)  # kHz -> cycles
        torch.cuda._sleep(cycles)
        torch.cuda.synchronize()

    def host_blocked() -> None:
        threading.Event().wait(args.seconds)

    for name, work in (
        ("idle", idle),
        ("compute", compute),
        ("waiting", waiting),
        ("host_blocked", host_blocked),
    ):
        sample_while(name, work)
    result = {
        "benchmark": "gpu_hang_signal",
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "driver": nvml.driver_version(),
        "phases": phases,
    }
    text = json.dumps(result)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


if __name__ == "__main__":
    sys.exit(main())
