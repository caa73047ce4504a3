"""Signals as readable bytes: the agent's single loop waits on the command's pipes and on signals together.

``signal.set_wakeup_fd`` makes the interpreter write each arriving signal's number to a pipe; the handlers
themselves do nothing, so every decision happens in the loop, never inside a handler.
"""

from __future__ import annotations

import contextlib
import os
import signal
from types import FrameType
from typing import Any

#: Signals passed on to the command's process group.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
#: Forwarded signals that also mean "stop": no restart in place after them, and SIGKILL after the grace period.
STOPPING = (signal.SIGTERM, signal.SIGINT)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """The wakeup pipe carries the signal; nothing to do here."""


class SignalInbox:
    """Install in the main thread; ``close`` restores what was there before."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._previous_handlers: dict[int, Any] = {}
        for signum in (*FORWARDED, signal.SIGCHLD):
            self._previous_handlers[signum] = signal.signal(signum, _ignore)
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)

    def fileno(self) -> int:
        return self._read

    def drain(self) -> list[int]:
        """The signals that arrived since the last call, in order."""
        numbers: list[int] = []
        while True:
            try:
                data = os.read(self._read, 512)
            except BlockingIOError:
                return numbers
            if not data:
                return numbers
            numbers.extend(data)

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous_fd)
        for signum, handler in self._previous_handlers.items():
            with contextlib.suppress(TypeError, ValueError):
                signal.signal(signum, handler)
        os.close(self._read)
        os.close(self._write)
