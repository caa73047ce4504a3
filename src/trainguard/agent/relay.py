"""Copies the command's stdout and stderr to the agent's own, byte for byte, noting when the last byte came."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

_CHUNK = 65536


class Relay:
    def __init__(self, clock: Callable[[], float], stdout_fd: int = 1, stderr_fd: int = 2) -> None:
        self._clock = clock
        self._targets = {"stdout": stdout_fd, "stderr": stderr_fd}
        #: pipe fd -> the agent's fd it is copied to (None once that one broke: keep reading, drop the bytes).
        self._pipes: dict[int, int | None] = {}
        #: When the last byte of the current attempt arrived (the agent's clock), None before the first.
        self.last_output_at: float | None = None

    def attach(self, stdout_pipe: int, stderr_pipe: int) -> None:
        self._pipes = {stdout_pipe: self._targets["stdout"], stderr_pipe: self._targets["stderr"]}
        self.last_output_at = None

    @property
    def pipes(self) -> list[int]:
        return list(self._pipes)

    def pump(self, pipe: int) -> bool:
        """Copy what ``pipe`` has; False when it reached end of file (then ``release`` it)."""
        try:
            data = os.read(pipe, _CHUNK)
        except OSError:
            data = b""
        if not data:
            return False
        self.last_output_at = self._clock()
        target = self._pipes[pipe]
        if target is not None and not _write_all(target, data):
            self._pipes[pipe] = None
        return True

    def release(self, pipe: int) -> None:
        del self._pipes[pipe]
        os.close(pipe)

    def close(self) -> None:
        for pipe in self._pipes:
            with contextlib.suppress(OSError):
                os.close(pipe)
        self._pipes = {}


def _write_all(fd: int, data: bytes) -> bool:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except OSError:
            return False
        view = view[written:]
    return True
