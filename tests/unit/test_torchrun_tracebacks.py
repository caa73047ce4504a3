"""The warm torchrun's agent logs a failed worker's traceback through torch's handlers without importing
torch._dynamo (torch's formatter imports it for a record that carries an exception: seconds of CPU in every
pod's first recovery). A fresh interpreter, since the test process may have imported it already."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging, sys
import torch.distributed.run
from trainguard.pod.torchrun import format_tracebacks_without_dynamo
assert format_tracebacks_without_dynamo() > 0
assert format_tracebacks_without_dynamo() == 0  # once per handler
log = logging.getLogger("torch.distributed.elastic.agent.server.api")
try:
    raise ZeroDivisionError("the worker's error")
except ZeroDivisionError:
    log.exception("worker failed")
print("dynamo imported:", "torch._dynamo" in sys.modules)
"""


def test_a_logged_traceback_is_written_in_full_and_torch_dynamo_stays_unimported() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "dynamo imported: False"
    lines = done.stderr.splitlines()
    assert any(line.endswith("] worker failed") for line in lines), lines
    # torch's own prefix on every line of the traceback, as without the filter.
    assert any(
        line.startswith("E") and line.endswith("] Traceback (most recent call last):") for line in lines
    )
    assert any(line.endswith("] ZeroDivisionError: the worker's error") for line in lines), lines
