"""The node checker's entry point (``trainguard node-checker``) as a real process, without an API server
(``--print``): one check of this machine, with a fault injected through the test aid (``readings.injected_items``)
and without; its loop, ended by SIGTERM; a checker with no pod to publish to says so, with no traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainguard.pod import checks, contract

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TRAINGUARD = Path(sys.executable).parent / "trainguard"


def env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_NAMESPACE")}
    return {**clean, **extra}


def test_one_check_with_an_injected_fault_says_hardware_and_names_the_item(tmp_path: Path) -> None:
    (tmp_path / "node-a").write_text("gpu.ecc, host.write\n")
    done = subprocess.run(
        [str(TRAINGUARD), "node-checker", "--once", "--print", "--timeout", "30"],
        env=env(**{contract.ENV_FAULT_INJECT: str(tmp_path), contract.ENV_NODE_NAME: "node-a"}),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    found = checks.CheckResult.from_dict(json.loads(line))
    assert (found.phase, found.verdict) == (checks.PERIODIC, checks.HARDWARE)
    verdicts = {item.name: item.verdict for item in found.failed}
    assert verdicts == {"gpu.ecc": checks.HARDWARE, "host.write": checks.ENVIRONMENT}
    assert "checking every 60 s" in done.stderr


def test_without_a_fault_nothing_fails_and_the_loop_checks_until_sigterm(tmp_path: Path) -> None:
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [str(TRAINGUARD), "node-checker", "--print", "--period", "0.2"],
            env=env(),
            stdout=stdout,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        while len(out.read_text().splitlines()) < 2:
            assert process.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "no two checks within 60 s"
            time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    for line in out.read_text().splitlines():
        found = checks.CheckResult.from_dict(json.loads(line))
        assert found.verdict != checks.HARDWARE  # this machine, no fault injected
        assert not [item for item in found.items if item.name == "host.cpu" and item.verdict != checks.OK]


def test_a_checker_with_no_pod_to_publish_to_says_what_to_set() -> None:
    done = subprocess.run(
        [str(TRAINGUARD), "node-checker", "--once"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "$POD_NAME and $POD_NAMESPACE" in done.stderr
    assert "Traceback" not in done.stderr
