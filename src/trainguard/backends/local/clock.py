"""The control plane's clock: wall-clock seconds that move monotonically while the process lives.

Times end up in the status and in ``describe``, so they are seconds since the epoch; deadlines must not jump
when the wall clock is set, so after start-up the clock advances with ``time.monotonic``. A restarted control
plane re-anchors on the wall clock, which keeps stored times meaningful across restarts.
"""

from __future__ import annotations

import time


class Clock:
    def __init__(self) -> None:
        self._wall = time.time()
        self._monotonic = time.monotonic()

    def __call__(self) -> float:
        return self._wall + (time.monotonic() - self._monotonic)
