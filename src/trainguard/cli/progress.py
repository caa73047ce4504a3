"""Progress for the commands that wait (``run`` following jobs, ``scale --wait``, building a test cluster).

On a terminal the current state is one block redrawn in place (ANSI cursor movement), with the time waited
so far; elsewhere (a pipe, a CI log) every change is one plain line and nothing is redrawn. Lines that must
stay (events, steps done) are ``note``-d: printed above the redrawn block, or as they come.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        in_place: bool | None = None,
        show_elapsed: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.in_place = self.stream.isatty() if in_place is None else in_place
        self._show_elapsed = show_elapsed
        self._clock = clock
        self._started = clock()
        self._blocks: dict[str, str] = {}
        self._printed: dict[str, str] = {}
        self._height = 0

    def update(self, text: str, key: str = "") -> None:
        """The state now (one or more lines); several keys are shown one below the other."""
        self._blocks[key] = text
        if self.in_place:
            self._redraw()
        elif self._printed.get(key) != text:
            self._printed[key] = text
            self._write(text + "\n")

    def note(self, line: str) -> None:
        """A line that stays: above the redrawn block on a terminal, as it comes otherwise."""
        if self.in_place:
            self._erase()
            self._write(line + "\n")
            self._redraw()
        else:
            self._write(line + "\n")

    def close(self) -> None:
        """Leave what is shown as it is; what is printed next goes below it."""
        self._height = 0
        self._blocks.clear()

    @property
    def elapsed(self) -> float:
        return self._clock() - self._started

    def _redraw(self) -> None:
        self._erase()
        if not self._blocks:
            return
        # Lines longer than the terminal would wrap, and the redraw would lose count of them.
        width = max(20, shutil.get_terminal_size().columns - 1)
        lines = "\n\n".join(self._blocks.values()).splitlines() or [""]
        if self._show_elapsed:
            lines[0] = f"{lines[0]}  ({self.elapsed:.0f}s)"
        text = "\n".join(line[:width] for line in lines)
        self._write(text + "\n")
        self._height = len(lines)

    def _erase(self) -> None:
        if self._height:
            self._write(f"\x1b[{self._height}F\x1b[J")
            self._height = 0

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def wait_until(
    poll: Callable[[], tuple[bool, str]],
    progress: Progress,
    timeout: float,
    interval: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[bool, str]:
    """Call ``poll`` (-> done, what to show) until it is done or ``timeout`` seconds passed; returns
    whether it is done and what it showed last."""
    while True:
        done, text = poll()
        progress.update(text)
        if done or progress.elapsed >= timeout:
            return done, text
        sleep(interval)
