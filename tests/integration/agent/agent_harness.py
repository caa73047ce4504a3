"""Helpers for the agent's integration tests: a running agent, its report, and waiting with deadlines."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import psutil

WORKLOAD = Path(__file__).with_name("workload.py")
T = TypeVar("T")


def wait_for(
    condition: Callable[[], T | None], timeout: float, what: str, details: Callable[[], str] = str
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{details()}")
        time.sleep(0.02)


@dataclass
class AgentRun:
    process: subprocess.Popen[bytes]
    directory: Path
    report: Path
    marker: Path
    stdout: Path
    stderr: Path
    extra: list[psutil.Process] = field(default_factory=list)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.report.exists():
            return []
        lines = [json.loads(line) for line in self.report.read_text().splitlines() if line.strip()]
        return [event for event in lines if kind is None or event["event"] == kind]

    def describe(self) -> str:
        return (
            f"events: {json.dumps(self.events(), indent=1)}\nmarkers: {self.markers()}\n"
            f"agent stderr: {self.stderr.read_bytes()[-2000:]!r}"
        )

    def wait_event(self, kind: str, count: int = 1, timeout: float = 15.0) -> dict[str, Any]:
        found = wait_for(
            lambda: len(self.events(kind)) >= count and self.events(kind),
            timeout,
            f"{count} {kind}",
            self.describe,
        )
        return found[count - 1]

    def wait_exit(self, timeout: float = 20.0) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the agent did not exit within {timeout} s\n{self.describe()}") from None

    def markers(self, event: str | None = None) -> list[tuple[str, float, int]]:
        if not self.marker.exists():
            return []
        rows = [line.split() for line in self.marker.read_text().splitlines() if line.strip()]
        return [(name, float(at), int(attempt)) for name, at, attempt in rows if event in (None, name)]

    def wait_marker(self, event: str, timeout: float = 15.0) -> tuple[str, float, int]:
        return wait_for(lambda: self.markers(event), timeout, f"marker {event}", self.describe)[0]

    def wait_output(self, text: bytes, timeout: float = 15.0) -> None:
        wait_for(lambda: text in self.stdout.read_bytes(), timeout, f"output {text!r}", self.describe)


def gone(pid: int, created: float | None = None) -> bool:
    """The process ended (a zombie waiting for init counts as ended), or its pid now names another process."""
    try:
        process = psutil.Process(pid)
        return process.status() == psutil.STATUS_ZOMBIE or (
            created is not None and abs(process.create_time() - created) > 0.05
        )
    except psutil.NoSuchProcess:
        return True


class LeaseOperator:
    """A loopback stand-in for the operator's lease endpoint, answering ``status`` (None: the connection is
    closed with no answer, ``hold`` seconds after the request came); it keeps when each renewal it answered 200
    arrived, and the path and token of each request."""

    def __init__(self, status: int | None, hold: float = 0.0) -> None:
        self.status = status
        self.hold = hold
        self.paths: list[str] = []
        self.renewed: list[float] = []
        self.asked = 0
        self.tokens: set[str] = set()
        state = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                state.asked += 1
                state.paths.append(self.path)
                state.tokens.add(self.headers.get("Authorization", ""))
                status = state.status
                if status is None:
                    time.sleep(state.hold)
                    self.close_connection = True
                    return
                if status == 200:
                    state.renewed.append(time.monotonic())
                body = b'{"message": "test"}'
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/agent-lease"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
