"""Waiting on a condition with a deadline, for the agent's tests that start real processes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T | None], what: str, timeout: float = 15.0) -> T:
    """Polls ``condition`` until it returns something truthy, which it returns; fails past ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)
