"""Each rank's own work per step, for finding stragglers (``trainguard.policy.stragglers``).

In synchronous training every rank takes the same wall time per step: the fast ones wait for the slowest in
each collective. What tells them apart is how much of the step a rank spends working rather than waiting. A
thread samples the state of each rank's main thread (``/proc/<pid>/stat``) every ``every`` seconds: asleep
(``S``, waiting in a collective, for data, for a lock) or not (running, runnable, in the kernel, stopped: a
rank held back, whatever holds it). Per step, a rank's work is its share of samples not asleep times the
step's wall time, from the steps and times of its heartbeats (the SDK's ``trainguard.heartbeat``), over the
latest ``window`` seconds.

Standard library only, Python 3.8: it runs in users' images from the bundle.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from trainguard.pod.summary import RankEntry

#: Sampling every 50 ms: 20 reads a second per rank, a fraction of a percent of a core for a pod of 8.
EVERY_SECONDS = 0.05
WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class _Mark:
    at: float
    step: int
    busy: int
    total: int


def thread_state(pid: int) -> str | None:
    """The state letter of ``pid``'s main thread (R, S, D, T, ...); None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    end = text.rfind(")")  # the command name is in parentheses and may hold anything
    return text[end + 2 : end + 3] if end >= 0 and len(text) > end + 2 else None


class RankWork:
    def __init__(
        self,
        every: float = EVERY_SECONDS,
        window: float = WINDOW_SECONDS,
        state: Callable[[int], str | None] = thread_state,
    ) -> None:
        self.every = every
        self.window = window
        self._state = state
        self._lock = threading.Lock()
        self._pids: dict[int, int] = {}
        #: rank -> (samples not asleep, samples), since the rank's process was first seen.
        self._counts: dict[int, list[int]] = {}
        self._marks: dict[int, deque[_Mark]] = {}
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="trainguard-rank-work", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def sample(self) -> None:
        """One look at every rank's main thread."""
        with self._lock:
            pids = dict(self._pids)
        for rank, pid in pids.items():
            state = self._state(pid)
            if state is None:
                continue
            with self._lock:
                counts = self._counts.get(rank)
                if counts is None or self._pids.get(rank) != pid:
                    continue
                counts[0] += state != "S"
                counts[1] += 1

    def track(self, beats: Mapping[int, tuple[int, int | None, float]]) -> None:
        """Each rank's latest heartbeat: rank -> (pid, step, written at). A rank whose process changed (a
        restart) starts over."""
        with self._lock:
            for rank, (pid, step, at) in beats.items():
                if self._pids.get(rank) != pid:
                    self._pids[rank] = pid
                    self._counts[rank] = [0, 0]
                    self._marks[rank] = deque()
                if step is None:
                    continue
                marks = self._marks[rank]
                if marks and marks[-1].step == step:
                    continue
                busy, total = self._counts[rank]
                marks.append(_Mark(at, step, busy, total))
                while len(marks) > 2 and at - marks[1].at >= self.window:
                    marks.popleft()
            for rank in set(self._pids) - set(beats):
                del self._pids[rank], self._counts[rank], self._marks[rank]

    def measured(self) -> list[RankEntry]:
        """Each rank's work per step over the window (ranks with two steps at least)."""
        out: list[RankEntry] = []
        with self._lock:
            for rank, marks in sorted(self._marks.items()):
                if len(marks) < 2:
                    continue
                first, last = marks[0], marks[-1]
                steps, samples = last.step - first.step, last.total - first.total
                if steps <= 0 or samples <= 0 or last.at <= first.at:
                    continue
                share = (last.busy - first.busy) / samples
                step = (last.at - first.at) / steps
                out.append(RankEntry(rank, steps, round(share * step, 6), round(step, 6)))
        return out

    def _run(self) -> None:
        while not self._stopped.wait(self.every):
            self.sample()
