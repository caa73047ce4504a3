"""A work queue of job keys: a key is processed by one worker at a time, a key added while it is being
processed is processed again afterwards, and keys can be scheduled for later (a backoff or deadline).

A key added ``first`` (a job never reconciled yet: its pods are still to be created) is taken before the others,
in the order they came: under a burst of new jobs, their pods go out before the reconciles that the earlier jobs'
pod changes ask for, and those fold the changes they waited through into one reconcile (and one status write).

A key whose processing fails is retried after its backoff (``backoff``; the engine's figures, the same on every
driver: ``trainguard.controller.retries``), and starts again from the base once it succeeds (``forget``)."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from trainguard.controller.retries import Retries, Retry

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self._ready: list[K] = []
        #: Keys added ``first`` and not taken yet: taken before ``_ready``'s.
        self._first: list[K] = []
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._later: list[tuple[float, int, K]] = []
        self._seq = 0
        self._closed = False
        self._cv = threading.Condition()
        self._retries: Retries[K] = Retries()

    def add(self, key: K, first: bool = False) -> None:
        with self._cv:
            if key in self._dirty:
                if first and key in self._ready:
                    self._ready.remove(key)
                    self._first.append(key)
                return
            self._dirty.add(key)
            if key not in self._processing:
                (self._first if first else self._ready).append(key)
                self._cv.notify()

    def add_after(self, key: K, seconds: float) -> None:
        with self._cv:
            self._seq += 1
            heapq.heappush(self._later, (self.monotonic() + max(seconds, 0.0), self._seq, key))
            self._cv.notify()

    def backoff(self, key: K) -> Retry:
        """``key`` failed: schedule it again after its backoff. Returns the step (failures in a row, delay)."""
        with self._cv:
            retry = self._retries.failed(key)
        self.add_after(key, retry.delay)
        return retry

    def forget(self, key: K) -> None:
        """``key`` succeeded: its next failure backs off from the base again."""
        with self._cv:
            self._retries.succeeded(key)

    def get(self, timeout: float) -> K | None:
        """The next key to process (mark it ``done`` afterwards), or None after ``timeout`` or on close."""
        deadline = self.monotonic() + timeout
        with self._cv:
            while True:
                self._promote()
                if self._first or self._ready:
                    key = self._first.pop(0) if self._first else self._ready.pop(0)
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                left = deadline - self.monotonic()
                if self._closed or left <= 0:
                    return None
                if self._later:
                    left = min(left, self._later[0][0] - self.monotonic())
                self._cv.wait(max(left, 0.001))

    def done(self, key: K) -> None:
        with self._cv:
            self._processing.discard(key)
            if key in self._dirty:
                self._ready.append(key)
                self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def __len__(self) -> int:
        with self._cv:
            return len(self._first) + len(self._ready)

    def _promote(self) -> None:
        now = self.monotonic()
        while self._later and self._later[0][0] <= now:
            _, _, key = heapq.heappop(self._later)
            if key not in self._dirty:
                self._dirty.add(key)
                if key not in self._processing:
                    self._ready.append(key)
