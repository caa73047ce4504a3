"""``HangSignal``: what counts as progress for the agent's hang detection, in order of trust.

It lives outside ``trainguard.api`` (which needs pydantic) because the agent imports it, and the agent runs
from a bundle of stdlib-only modules in users' own images (``trainguard.bundle``). The api re-exports it.
"""

from __future__ import annotations

from enum import Enum


class HangSignal(str, Enum):
    """What counts as progress, in order of trust."""

    HEARTBEAT = "heartbeat"
    LOG = "log"
    CPU = "cpu"
    #: The process tree's I/O (``/proc/<pid>/io``: rchar and wchar): ModelArts' first suspension rule.
    IO = "io"
