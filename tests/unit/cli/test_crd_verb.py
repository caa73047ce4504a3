"""``trainguard crd``: the CRD as YAML, for kubectl apply -f -."""

from __future__ import annotations

import json

import pytest
import yaml

from trainguard.api.crd import aitrainingjob_crd, native_crd, pytorchjob_crd
from trainguard.cli.main import main


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], native_crd),
        (["--dialect", "aitrainingjob"], aitrainingjob_crd),
        (["--dialect", "pytorchjob"], pytorchjob_crd),
    ],
)
def test_prints_the_crd(capsys: pytest.CaptureFixture[str], argv: list[str], expected: object) -> None:
    assert main(["crd", *argv]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert yaml.safe_load(out) == expected()  # type: ignore[operator]


def test_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["name"] == "trainingjobs.trainguard.io"


def test_unknown_dialect(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd", "--dialect", "tfjob"]) == 2
    assert "invalid choice: 'tfjob'" in capsys.readouterr().err
