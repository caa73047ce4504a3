"""The operator's bound on its requests in flight (``Kube.bounded``): however many threads send at once, no more
than the bound are out at a time; the leader election's view (``unbounded``) is not held behind them; a watch is
not counted. The API server is a loopback HTTP server that holds every request until the test lets it go."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from trainguard.backends.k8s.client import Kube


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most = 0
        self.answered = 0
        #: Each held request takes one of these to be answered.
        self.releases = threading.Semaphore(0)
        self.arrived: list[str] = []

    def wait_for(self, in_flight: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while self.in_flight < in_flight:
            assert time.monotonic() < deadline, f"{self.in_flight} requests in flight, not {in_flight}"
            time.sleep(0.01)


class Handler(BaseHTTPRequestHandler):
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if "watch=true" in self.path:
            self._answer({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "1"}}}, line=True)
            return
        with self.server.lock:
            self.server.in_flight += 1
            self.server.most = max(self.server.most, self.server.in_flight)
            self.server.arrived.append(self.path.rsplit("/", 1)[-1])
        assert self.server.releases.acquire(timeout=20)
        # Counted before the answer goes out: the client may see its answer before this handler ends.
        with self.server.lock:
            self.server.in_flight -= 1
            self.server.answered += 1
        self._answer({"kind": "Pod", "metadata": {"name": self.path.rsplit("/", 1)[-1]}})

    def _answer(self, body: dict[str, Any], line: bool = False) -> None:
        data = json.dumps(body).encode() + (b"\n" if line else b"")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[Server]:
    server = Server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.releases.release(100)
    server.shutdown()
    server.server_close()


@pytest.fixture
def kube(server: Server, tmp_path: Path) -> Iterator[Kube]:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    kube = Kube(str(path))
    yield kube
    kube.close()


def send(kube: Kube, count: int, name: str = "p") -> list[threading.Thread]:
    threads = [
        threading.Thread(target=kube.get, args=(f"/api/v1/namespaces/ns/pods/{name}{n}",), daemon=True)
        for n in range(count)
    ]
    for thread in threads:
        thread.start()
    return threads


def test_no_more_than_the_bound_are_out_at_once(server: Server, kube: Kube) -> None:
    bounded = kube.bounded(3)
    threads = send(bounded, 8)
    server.wait_for(3)
    time.sleep(0.3)  # room for a fourth request to arrive, were the bound not kept
    assert server.in_flight == 3
    server.releases.release(100)
    for thread in threads:
        thread.join(10)
    assert server.answered == 8
    assert server.most == 3


def test_the_unbounded_view_and_watches_are_not_held_behind_the_bound(server: Server, kube: Kube) -> None:
    bounded = kube.bounded(2)
    threads = send(bounded, 2)
    server.wait_for(2)
    # The leader election's renewal goes out beside the two held requests.
    (renewal,) = send(bounded.unbounded(), 1)
    server.wait_for(3)
    # A watch opens and streams although the bound is taken.
    events = bounded.watch("/api/v1/pods", "1", {}, timeout_seconds=1)
    assert next(events)["type"] == "BOOKMARK"
    events.close()
    server.releases.release(100)
    for thread in [*threads, renewal]:
        thread.join(10)
    assert server.answered == 3


def until(check: Any, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.01)


def test_background_requests_take_a_slot_only_when_no_other_waits(server: Server, kube: Kube) -> None:
    bounded = kube.bounded(2)
    slots = bounded._slots
    assert slots is not None
    held = send(bounded, 2, "held")
    server.wait_for(2)
    # A Service waits in the background; a pod comes after it and waits too.
    (quiet,) = send(bounded.background(), 1, "service")
    until(lambda: slots.waiting_in_background == 1, "background request waiting")
    (pod,) = send(bounded, 1, "pod")
    until(lambda: slots.waiting == 1, "pod waiting")
    server.releases.release(1)  # one slot frees: the pod's, although the Service waited first
    until(lambda: len(server.arrived) == 3, "third request")
    assert server.arrived[2] == "pod0"
    server.releases.release(3)
    for thread in [*held, quiet, pod]:
        thread.join(10)
    assert server.arrived[3] == "service0"
    assert server.answered == 4
