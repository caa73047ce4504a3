"""A hot spare's wait (``contract.ENV_LIVE_SPARE_FD``): the live launcher keeps spare workers in a pod, each
started ahead (its interpreter, ``import torch``, the model built, the warm-up run) and holding no rank. The
spare blocks here, on its end of a pipe, until the launcher calls it: a line with the local rank of the worker
that failed, after which it arrives in the next round as a newcomer that is already warm; or the pipe's end
(the pod's work is done, or its launcher gone), after which it leaves without training. A spare keeps its own
``LOCAL_RANK`` (the launcher gives each spare a slot of its own after the pod's workers, and so its own device):
the failed worker's slot becomes the pod's next spare."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from trainguard.pod import contract


@dataclass(frozen=True)
class Called:
    """A spare called: the local rank of the worker whose place it takes, and when (``time.time()``)."""

    replaces: int
    at: float


class Released(Exception):
    """The spare's pipe ended without a call: the pod needs it no more."""


def is_spare() -> bool:
    return bool(os.environ.get(contract.ENV_LIVE_SPARE_FD))


def wait_for_call() -> Called | None:
    """Blocks until the launcher calls this spare; None for a process that is no spare. ``Released`` when the
    pipe ends first."""
    fd_text = os.environ.pop(contract.ENV_LIVE_SPARE_FD, "")
    if not fd_text:
        return None
    fd = int(fd_text)
    marks = os.environ.get(contract.ENV_LIVE_MARK)
    if marks:  # the launcher counts this spare ready (warm) from now on
        with contextlib.suppress(OSError):
            Path(marks, f"{os.getpid()}{contract.SPARE_READY_SUFFIX}").touch()
    line = b""
    try:
        while not line.endswith(b"\n"):
            chunk = os.read(fd, 64)
            if not chunk:
                raise Released("the launcher closed the spare's pipe: nothing to take over")
            line += chunk
    finally:
        os.close(fd)
    return Called(int(line.strip() or b"-1"), time.time())
