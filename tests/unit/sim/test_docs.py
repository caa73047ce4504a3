"""docs/simulator.md shows ``trainguard simulate`` runs with their output: run them and compare, so that the
page cannot rot. A run shown with ``...`` as its output must succeed (and print JSON when asked to)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.unit.policy.jobs import CCE_JOB, REPO
from trainguard.cli.main import main

DOC = REPO / "docs" / "simulator.md"
_BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def _blocks(kind: str) -> list[str]:
    return [body for found, body in _BLOCK.findall(DOC.read_text()) if found == kind]


def _runs() -> list[tuple[str, str]]:
    """(command, expected output) for every example run on the page."""
    runs: list[tuple[str, str]] = []
    for block in _blocks("console"):
        if "JOB.yaml" in block:
            continue  # the synopsis
        for chunk in block.split("$ ")[1:]:
            command, _, output = chunk.partition("\n")
            runs.append((command, output))
    return runs


RUNS = _runs()


def test_the_page_shows_a_run_of_each_kind() -> None:
    commands = " ".join(command for command, _ in RUNS)
    for flag in ("--compare", "--trace", "--plot-dir", "-o json", "--failure-mix"):
        assert flag in commands
    assert len(RUNS) >= 5


@pytest.mark.parametrize(("command", "expected"), RUNS, ids=[command for command, _ in RUNS])
def test_example(
    command: str,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (trace,) = _blocks("csv")
    (tmp_path / "trace.csv").write_text(trace)
    (tmp_path / "examples" / "jobs").mkdir(parents=True)
    shutil.copy(CCE_JOB, tmp_path / "examples" / "jobs")
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(command)
    assert argv[0] == "trainguard"
    assert main(argv[1:]) == 0
    out = capsys.readouterr().out
    if expected.strip() == "...":
        if "-o json" in command:
            assert {"goodput", "lost_by_cause", "restarts"} <= set(json.loads(out))
        return
    assert out == expected
    for line in out.splitlines():
        if line.startswith("wrote "):
            assert (tmp_path / line.removeprefix("wrote ")).read_bytes().startswith(b"\x89PNG")
