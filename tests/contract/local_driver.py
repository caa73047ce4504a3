"""The contract driver for the local runtime: real processes, through the ``trainguard`` CLI."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.integration.local.harness import LocalRuntime

from .driver import View


class LocalDriver:
    name = "local"

    def __init__(self, runtime: LocalRuntime) -> None:
        self.runtime = runtime
        self.job = ""

    def submit(self, job: dict[str, Any]) -> None:
        self.job = self.runtime.submit(job)

    def view(self) -> View:
        view = self.runtime.view(self.job)
        # What the runtime carried out: one Nudged event per pod whose workers it restarted for a failure.
        events = self.runtime.call("events", job=self.job)
        nudged = {
            e["object"]: e["message"].split(":")[0].removeprefix("nudged for ")
            for e in events
            if e["reason"] == "Nudged"
        }
        return {**view, "nudged": nudged}

    def wait(self, condition: Callable[[View], bool], what: str, timeout: float = 30) -> View:
        deadline = time.monotonic() + timeout
        while True:
            view = self.view()
            if condition(view):
                return view
            if time.monotonic() > deadline:
                raise AssertionError(f"local: not {what} after {timeout} s: {view['status'].get('phase')}")
            time.sleep(0.1)

    def _cli(self, *argv: str) -> None:
        result = self.runtime.cli(*argv)
        assert result.code == 0, result.err

    def exit(self, pod: str, code: int) -> None:
        self._cli("chaos", "kill", pod, "--exit-code", str(code))

    def node_down(self, node: str) -> None:
        self._cli("chaos", "node-down", node)

    def node_up(self, node: str) -> None:
        self._cli("chaos", "node-up", node)

    def force_delete(self, pod: str) -> None:
        self._cli("chaos", "force-delete", pod)

    def evict(self, pod: str) -> None:
        self._cli("chaos", "evict", pod)

    def scale(self, role: str, replicas: int) -> None:
        self._cli("scale", self.job, "--role", role, "--replicas", str(replicas))

    def close(self) -> None:
        leftovers = self.runtime.stop()
        assert not leftovers, f"processes left behind: {leftovers}"
