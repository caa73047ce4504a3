"""The command builds the parser of the verb it is given alone (a long-running verb, the operator or the agent,
starts without importing every other verb's modules), and every verb's parser otherwise."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainguard.cli.main import build_parser, main

ALL_VERBS = {"agent", "operator", "run", "simulate", "node-checker", "get", "validate"}


def verbs_of(argv: list[str]) -> set[str]:
    parser = build_parser(argv)
    (subparsers,) = [a for a in parser._actions if a.dest == "verb"]
    return set(subparsers.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "verbs"),
    [
        (["operator", "--namespace", "x"], {"operator"}),
        (["node-checker", "--help"], {"node-checker"}),
        (["agent", "--", "true"], {"agent"}),
    ],
)
def test_a_named_verb_gets_its_parser_alone(argv: list[str], verbs: set[str]) -> None:
    assert verbs_of(argv) == verbs


@pytest.mark.parametrize("argv", [[], ["--help"], ["--version"], ["opreator"], ["_local"]])
def test_anything_else_gets_every_verb(argv: list[str]) -> None:
    assert verbs_of(argv) >= ALL_VERBS


def test_a_misspelt_verb_is_told_the_verbs_there_are(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["opreator"]) == 2
    error = capsys.readouterr().err
    assert "invalid choice: 'opreator'" in error
    assert "'operator'" in error


def test_the_operator_starts_without_the_other_verbs_modules() -> None:
    code = (
        "import sys; from trainguard.cli.main import build_parser; build_parser(['operator']); "
        "import trainguard.backends.k8s.operator; "
        "print(sorted(m for m in sys.modules if m.startswith(('trainguard.backends.sim', 'trainguard.backends.local', "
        "'trainguard.agent.supervisor', 'trainguard.ui', 'prometheus_client'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
