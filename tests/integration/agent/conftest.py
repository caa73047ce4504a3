"""Runs the real agent (``python -m trainguard.agent``) on real processes; waits on conditions with deadlines."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from agent_harness import WORKLOAD, AgentRun


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[Callable[..., AgentRun]]:
    runs: list[AgentRun] = []

    def start(
        agent_args: list[str],
        workload: list[str],
        *,
        entry: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> AgentRun:
        directory = tmp_path / f"run{len(runs)}"
        directory.mkdir()
        report, marker = directory / "report.jsonl", directory / "marker"
        stdout, stderr = directory / "stdout", directory / "stderr"
        argv = [
            *(entry or [sys.executable, "-m", "trainguard.agent"]),
            "--report",
            str(report),
            "--termination-log",
            str(directory / "termination-log"),
            *agent_args,
            "--",
            sys.executable,
            str(WORKLOAD),
            "--marker",
            str(marker),
            *workload,
        ]
        with open(stdout, "wb") as out, open(stderr, "wb") as err:
            process = subprocess.Popen(
                argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                start_new_session=True, cwd=directory,
            )  # fmt: skip
        run = AgentRun(process, directory, report, marker, stdout, stderr)
        runs.append(run)
        return run

    yield start
    for run in runs:  # whatever a failed test left running
        with contextlib.suppress(psutil.Error):
            tree = [*psutil.Process(run.process.pid).children(recursive=True), *run.extra]
            for process in tree:
                with contextlib.suppress(psutil.Error):
                    process.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.process.pid, signal.SIGKILL)
        run.process.wait(10)
