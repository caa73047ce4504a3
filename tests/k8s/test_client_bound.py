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
        self.gate = threading.Event()

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
        assert self.server.gate.wait(20)
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
    server.gate.set()
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


def send(kube: Kube, count: int) -> list[threading.Thread]:
    threads = [
        threading.Thread(target=kube.get, args=(f"/api/v1/namespaces/ns/pods/p{n}",), daemon=True)
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
    server.gate.set()
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
    server.gate.set()
    for thread in [*threads, renewal]:
        thread.join(10)
    assert server.answered == 3
