"""The control file: an exit code the runtime asks the pod to end with (CCE's job barrier, ``trainguard chaos``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trainguard.agent.control import take_exit_request
from trainguard.agent.watchers.base import ExitRequested, Tick


class ControlWatcher:
    def __init__(self, path: Path, say: Callable[[str], None]) -> None:
        self.path = path
        self.say = say

    def start(self, now: float) -> None:
        pass

    def poll(self, tick: Tick) -> ExitRequested | None:
        request = take_exit_request(self.path)
        if isinstance(request, int):
            return ExitRequested(request)
        if request is not None:
            self.say(f"ignoring a request: {request}")
        return None
