"""Horovod as example 3 runs it: horovodrun with Gloo on this machine, plain and elastic.

Horovod comes from scripts/build-horovod; conftest.py fails (or skips) these tests without it.
"""

from __future__ import annotations

import re
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
HOROVODRUN = Path(sys.executable).parent / "horovodrun"
RUN_TIMEOUT_S = 90


def horovodrun(*args: str) -> str:
    """Runs horovodrun to the end and returns its output (stdout and stderr); fails the test on a non-zero
    exit or when it runs past RUN_TIMEOUT_S (then it and every process it started are killed)."""
    process = subprocess.Popen(
        [str(HOROVODRUN), *args], cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(process.pid).children(recursive=True):
            child.kill()
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"horovodrun {' '.join(args)} ran past {RUN_TIMEOUT_S} s; its output:\n{output}")
    assert process.returncode == 0, f"horovodrun exited with {process.returncode}; its output:\n{output}"
    return output


def rank_lines(output: str) -> dict[int, dict[str, str]]:
    """The `rank=R key=value ...` lines that the workers print, by rank (horovodrun prefixes each line)."""
    lines: dict[int, dict[str, str]] = {}
    for match in re.finditer(r"(rank=\d+(?: \w+=\S+)+)$", output, re.MULTILINE):
        fields = dict(field.split("=", 1) for field in match.group(1).split())
        lines[int(fields.pop("rank"))] = fields
    return lines


def test_two_ranks_allreduce_the_sum_of_their_values() -> None:
    output = horovodrun("--gloo", "-np", "2", "-H", "localhost:2", sys.executable, "allreduce_worker.py")

    assert rank_lines(output) == {
        0: {"size": "2", "sum": "3"},
        1: {"size": "2", "sum": "3"},
    }, output


def test_elastic_run_with_a_host_discovery_script_completes_its_steps(tmp_path: Path) -> None:
    discovery = tmp_path / "discover-hosts.sh"
    discovery.write_text("#!/bin/sh\necho localhost:2\n")
    discovery.chmod(discovery.stat().st_mode | stat.S_IXUSR)

    # Without --network-interfaces an elastic horovodrun waits for a second host to compare its NICs with,
    # and with only this machine it waits until the elastic timeout (600 s).
    output = horovodrun(
        "--gloo",
        "-np", "2",
        "--min-np", "1",
        "--max-np", "3",
        "--network-interfaces", "lo",
        "--host-discovery-script", str(discovery),
        sys.executable, "elastic_worker.py", "5",
    )  # fmt: skip

    assert rank_lines(output) == {
        0: {"size": "2", "step": "5", "same_weights": "True"},
        1: {"size": "2", "step": "5", "same_weights": "True"},
    }, output
