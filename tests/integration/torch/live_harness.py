"""What the live-mode tests with real processes share: a process whose stdout is ``live_worker.py``'s JSON
events (a worker, or a launcher whose workers write to its stdout), the job's store as a process of its own
(``trainguard.pod.rendezvous_store``, which can be killed and started again on its port), and waiting on a
condition with a deadline."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("live_worker.py")
SRC = str(Path(__file__).parents[3] / "src")
#: A rank's start (python, torch's import) on a busy 2-core machine, and a round's forming.
START = 120.0
ROUND = 60.0


class Rank:
    """A process whose stdout carries ``live_worker.py``'s events, and its stderr in a file."""

    def __init__(self, env: dict[str, str], stderr: Path, command: list[str] | None = None) -> None:
        self.stderr = stderr
        with stderr.open("w") as err:
            self.process = subprocess.Popen(
                command or [sys.executable, str(WORKER)],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
            )
        self.events: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with contextlib.suppress(ValueError, OSError):  # closed by ``stop`` while another holds the pipe
            for line in self.process.stdout:
                with contextlib.suppress(json.JSONDecodeError):
                    self.events.append(json.loads(line))

    @property
    def member(self) -> str:
        return next(e["member"] for e in list(self.events) if e["event"] == "ready")

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in list(self.events) if e["event"] == event]

    def formed(self) -> list[dict[str, Any]]:
        return self.of("formed")

    def steps(self) -> list[dict[str, Any]]:
        return self.of("step")

    def last_step(self) -> int:
        steps = self.steps()
        return steps[-1]["step"] if steps else 0

    def tail(self, lines: int = 25) -> str:
        """Its last events and the end of its stderr (with ``TRAINGUARD_LIVE_TRACE=1``: its rounds), for a
        failure's message."""
        err = self.stderr.read_text(errors="replace").splitlines()[-lines:] if self.stderr.exists() else []
        events = [json.dumps(e) for e in list(self.events)[-5:]]
        return "\n".join([f"-- {self.stderr.name} (exit {self.process.poll()})", *events, *err])

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait()
        self.reader.join(timeout=10)  # it ends at the pipe's end: the process is gone (and any it started)
        if self.process.stdout is not None:
            self.process.stdout.close()


def tails(ranks: list[Rank]) -> str:
    """Every rank's ``tail``, for ``wait_for``'s ``explain``."""
    return "\n" + "\n".join(rank.tail() for rank in ranks)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class StoreProcess:
    """The job's store, served by ``python -m trainguard.pod.rendezvous_store`` on ``port``."""

    def __init__(self, port: int, env: dict[str, str]) -> None:
        self.port = port
        self.env = env
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "trainguard.pod.rendezvous_store", "--port", str(self.port)],
            stdout=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # written once it serves (or empty: it ended)
        assert "serving on port" in line, f"the store did not start: {line!r}, exit {self.process.poll()}"

    def kill(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            self.process.wait()
            if self.process.stdout is not None:
                self.process.stdout.close()
            self.process = None

    def client(self) -> Any:
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        return TCPStore("127.0.0.1", self.port, is_master=False)


def wait_for(what: str, check: Callable[[], Any], seconds: float, explain: Callable[[], str] = str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {seconds:.0f} s {explain()}")
