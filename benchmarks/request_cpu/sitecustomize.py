"""Each request's CPU in a ``trainguard operator`` process, by kind (``benchmarks/results/operator-request-cpu-*``).

Put this folder first on the operator's ``PYTHONPATH`` (``benchmarks/k8s_peers.py`` passes its environment on;
with ``TRAINGUARD_UNDER_TEST``, copy this file into that ``src``). Once the operator's client is imported, its
``Kube._answer`` is wrapped: the CPU of the calling thread (``time.thread_time``) from the request's start to its
body read, summed by method and resource, and each watch event's read and decoding. Every second, and at exit, the
sums go to ``$REQUEST_CPU_OUT`` (``/tmp/request-cpu.json``) as {"METHOD resource": [requests, CPU seconds]}.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import sys
import threading
import time
from typing import Any

OUT = os.environ.get("REQUEST_CPU_OUT", "/tmp/request-cpu.json")
_sums: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
_lock = threading.Lock()


def _add(name: str, cpu: float) -> None:
    with _lock:
        _sums[name][0] += 1
        _sums[name][1] += cpu


def _resource(method: str, path: str) -> str:
    parts = path.split("?")[0].split("/")
    if path.endswith("/status"):
        return parts[-3] + "/status"
    return parts[-1] if method == "POST" else parts[-2]


def _install() -> None:
    from trainguard.backends.k8s import client

    answer, watch = client.Kube._answer, client.Kube.watch

    def timed_answer(self: Any, method: str, path: str, *rest: Any) -> Any:
        started = time.thread_time()
        try:
            return answer(self, method, path, *rest)
        finally:
            _add(f"{method} {_resource(method, path)}", time.thread_time() - started)

    def timed_watch(self: Any, path: str, *rest: Any, **named: Any) -> Any:
        events = watch(self, path, *rest, **named)
        while True:
            started = time.thread_time()
            try:
                event = next(events)
            except StopIteration:
                return
            finally:
                _add(f"watch-event {path.split('/')[-1]}", time.thread_time() - started)
            yield event

    client.Kube._answer = timed_answer  # type: ignore[method-assign]
    client.Kube.watch = timed_watch  # type: ignore[method-assign]


def _dump() -> None:
    with _lock:
        sums = {
            name: [int(n), round(cpu, 4)] for name, (n, cpu) in sorted(_sums.items(), key=lambda i: -i[1][1])
        }
    with open(OUT, "w") as out:
        json.dump(sums, out, indent=1)


def _watch_for_the_client() -> None:
    while not hasattr(sys.modules.get("trainguard.backends.k8s.client"), "Kube"):  # its body has run
        time.sleep(0.05)
    _install()
    while True:
        time.sleep(1)
        _dump()


if "operator" in sys.argv[1:2]:
    atexit.register(_dump)
    threading.Thread(target=_watch_for_the_client, name="request-cpu", daemon=True).start()
