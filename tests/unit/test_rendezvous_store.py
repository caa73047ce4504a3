"""``python -m trainguard.pod.rendezvous_store``: serves a TCPStore that torchrun's agents use as clients, and
ends cleanly on SIGTERM."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

torch_distributed = pytest.importorskip("torch.distributed")

START_SECONDS = 60.0


def _serving_port(process: subprocess.Popen[str], log: Path) -> int:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        found = re.search(r"serving on port (\d+)", log.read_text())
        if found:
            return int(found.group(1))
        if process.poll() is not None:
            pytest.fail(f"the store exited with {process.returncode}: {log.read_text()}")
        time.sleep(0.1)
    pytest.fail(f"the store did not serve within {START_SECONDS:g} s: {log.read_text()}")


@pytest.mark.integration
def test_the_store_serves_clients_and_stops_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "store.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "trainguard.pod.rendezvous_store", "--port", "0"],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        port = _serving_port(process, log)
        first = torch_distributed.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))
        second = torch_distributed.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))
        first.set("torch.rendezvous.job", b"state")
        assert second.get("torch.rendezvous.job") == b"state"
        assert second.compare_set("torch.rendezvous.job", b"state", b"next") == b"next"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert "SIGTERM, stopping" in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def test_the_store_module_imports_nothing_of_trainguards_but_its_package() -> None:
    code = (
        "import sys, trainguard.pod.rendezvous_store as m; "
        "print(sorted(n for n in sys.modules if n.startswith(('trainguard', 'kubernetes'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == str(
        ["trainguard", "trainguard._version", "trainguard.pod", "trainguard.pod.rendezvous_store"]
    )
