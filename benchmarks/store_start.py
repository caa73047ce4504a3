"""The rendezvous store's start and memory: trainguard's server (``python -m trainguard.pod.rendezvous_store``,
``trainguard.pod.tcpstore``) against torch's own (``TCPStore(is_master=True)`` in a fresh python, as the store's
pod ran it before), in the same run, alternating.

Start: from the process's start to the first answer a torch client gets from it (a ``set`` then a ``get``,
once a plain connect, tried every 5 ms, finds it listening). Memory: the server process's resident set once ``--clients``
torch clients are connected and have each set and read a 2 KB value (a rendezvous state's size).

    python benchmarks/store_start.py [--runs 5] [--clients 50] [--results DIR]

The last line printed is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch.distributed as dist
from _results import ENV_UNDER_TEST, keep, machine

SRC = Path(__file__).resolve().parents[1] / "src"
TORCHS = (
    "import signal, sys\n"
    "from datetime import timedelta\n"
    "from torch.distributed import TCPStore\n"
    "store = TCPStore('localhost', int(sys.argv[1]), is_master=True, wait_for_workers=False, "
    "timeout=timedelta(seconds=60))\n"
    "signal.sigwait({signal.SIGTERM})\n"
)
START_BOUND_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def command(server: str, port: int) -> list[str]:
    if server == "trainguard":
        return [sys.executable, "-m", "trainguard.pod.rendezvous_store", "--port", str(port)]
    return [sys.executable, "-c", TORCHS, str(port)]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmRSS for {pid}")


def one(server: str, clients: int) -> dict[str, float]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.environ.get(ENV_UNDER_TEST, str(SRC))}
    started = time.monotonic()
    process = subprocess.Popen(command(server, port), env=env, stdout=subprocess.DEVNULL)
    try:
        while True:  # a plain connect first: torch's client backs off between its own tries
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:  # nothing listens yet
                if time.monotonic() - started > START_BOUND_S:
                    raise SystemExit(f"{server}'s store did not listen within {START_BOUND_S:g} s") from None
                time.sleep(0.005)
        first = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))
        first.set("probe", b"1")
        assert first.get("probe") == b"1"
        answered = time.monotonic() - started
        connected = [dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))
                     for _ in range(clients)]  # fmt: skip
        for index, client in enumerate(connected):
            client.set(f"torch.rendezvous.{index}", b"s" * 2048)
            client.get(f"torch.rendezvous.{index}")
        return {"start_s": round(answered, 3), "rss_mib": rss_mib(process.pid)}
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--results", default=None, help="where to keep the raw JSON (benchmarks/results)")
    args = parser.parse_args()
    servers = ("trainguard", "torch")
    runs: dict[str, list[dict[str, float]]] = {server: [] for server in servers}
    for run in range(args.runs):
        for server in servers if run % 2 == 0 else reversed(servers):
            runs[server].append(one(server, args.clients))
            print(f"store_start: run {run + 1}: {server}: {runs[server][-1]}", file=sys.stderr)
    figures: dict[str, Any] = {
        server: {
            "start_s": statistics.median(r["start_s"] for r in found),
            "rss_mib": statistics.median(r["rss_mib"] for r in found),
        }
        for server, found in runs.items()
    }
    result = {
        "machine": machine(),
        "runs": args.runs,
        "clients": args.clients,
        "figures": figures,
        "raw": runs,
    }
    path = keep("store_start", result, args.results)
    print(f"store_start: kept {path}", file=sys.stderr)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
