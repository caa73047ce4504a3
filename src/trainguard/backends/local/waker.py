"""Waking the control plane's loop from other threads and from signals, without locks.

A pipe: ``wake()`` writes a byte, ``wait(timeout)`` sleeps in ``select`` until a byte arrives. Registered as
the interpreter's signal wakeup fd, it is also written to by every signal that has a Python handler (SIGCHLD:
an agent exited), so a signal handler never has to take a lock the interrupted thread might hold.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal


class Waker:
    def __init__(self) -> None:
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe wakes the loop just as well
            os.write(self._write, b"\0")

    def wait(self, timeout: float) -> None:
        ready, _, _ = select.select([self._read], [], [], max(0.0, timeout))
        if ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._read, 4096):
                    pass

    def wake_on_signals(self) -> None:
        """Make arriving signals wake the loop (call from the main thread)."""
        signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)
