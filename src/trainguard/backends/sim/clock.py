"""The virtual clock: a heap of timed callbacks, run in time order (ties in the order they were scheduled).

Nothing in the simulator reads a real clock; ``now`` moves only when the next event is taken.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import count


class VirtualClock:
    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = count()

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run ``action`` at ``when`` (at once, after what is already due now, if ``when`` has passed)."""
        heapq.heappush(self._heap, (max(when, self.now), next(self._seq), action))

    def next_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def advance_to(self, when: float) -> None:
        """Move the clock to ``when`` (never back) without running anything."""
        self.now = max(self.now, when)

    def pop(self) -> Callable[[], None]:
        """Move to the next event's time and hand its action over (the caller runs it)."""
        when, _, action = heapq.heappop(self._heap)
        self.now = when
        return action
