"""The contract suite's view of a backend: submit a job, inject faults, read the job as users see it.

A driver adapts one backend (the local runtime, the controller's in-memory fake, later the simulator and
Kubernetes) to these few operations; the scenarios in ``test_contract.py`` use nothing else, so every
backend is held to the same behaviour. ``view()`` returns the job in the shape of ``trainguard get JOB -o
json`` (at least ``status`` with phase, conditions, restartCounts, replicas, pods and history).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

View = dict[str, Any]


class Driver(Protocol):
    name: str

    def submit(self, job: dict[str, Any]) -> None:
        """Run the job (a native TrainingJob as data); one job per driver."""

    def view(self) -> View: ...

    def wait(self, condition: Callable[[View], bool], what: str, timeout: float = 30) -> View:
        """The view once ``condition`` holds; fails the test (naming ``what``) past the deadline."""

    def exit(self, pod: str, code: int) -> None:
        """The pod's training process ends with ``code``."""

    def node_down(self, node: str) -> None: ...

    def node_up(self, node: str) -> None: ...

    def force_delete(self, pod: str) -> None: ...

    def evict(self, pod: str) -> None: ...

    def scale(self, role: str, replicas: int) -> None: ...

    def close(self) -> None:
        """Stop everything the driver started."""


def pod(view: View, name: str) -> dict[str, Any]:
    return next(p for p in view["status"]["pods"] if p["name"] == name)


def running(view: View, role: str | None = None) -> list[str]:
    return sorted(
        p["name"]
        for p in view["status"]["pods"]
        if p["phase"] == "Running" and (role is None or p["role"] == role)
    )


def faults(view: View) -> list[dict[str, Any]]:
    return [entry for entry in view["status"]["history"] if entry["kind"] == "fault"]
