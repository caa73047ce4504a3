"""docs/policy.md shows `trainguard explain` runs with their output: run them and compare, so it cannot rot."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.unit.policy.jobs import CCE_JOB, REPO
from trainguard.cli.main import main

DOC = REPO / "docs" / "policy.md"
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


def test_the_page_has_examples_for_every_restart_policy() -> None:
    shown = " ".join(output for _, output in RUNS)
    for policy in ("Never", "OnFailure", "Always", "ExitCode", "OnNodeFail", "OnNodeFailWithExitCode"):
        assert f"restartPolicy ({policy})" in shown
    assert len(RUNS) >= 15


@pytest.mark.parametrize(("command", "expected"), RUNS, ids=[command for command, _ in RUNS])
def test_example(
    command: str,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (job,) = [block for block in _blocks("yaml") if "name: policy-demo" in block]
    (tmp_path / "policy-demo.yaml").write_text(job)
    (tmp_path / "examples" / "jobs").mkdir(parents=True)
    shutil.copy(CCE_JOB, tmp_path / "examples" / "jobs")
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(command)
    assert argv[0] == "trainguard"
    assert main(argv[1:]) == 0
    assert capsys.readouterr().out == expected
