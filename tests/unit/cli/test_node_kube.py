"""``trainguard node list|release`` and ``trainguard chaos hardware-fault|hardware-repair`` with
``--kubeconfig``: bad input is one clear line, never a traceback (the cluster's side is tested on the kwok
cluster: tests/k8s/test_node_isolation.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainguard.cli.main import main


def _unreachable(tmp_path: Path) -> str:
    """A kubeconfig naming a server nobody listens on (port 1 of loopback)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


@pytest.mark.parametrize(
    "argv",
    [
        ["node", "list"],
        ["node", "release", "n1"],
        ["chaos", "hardware-fault", "n1"],
        ["chaos", "hardware-repair", "n1"],
    ],
)
def test_a_kubeconfig_that_cannot_be_read_is_one_clear_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert main([*argv, "--kubeconfig", str(missing)]) != 0
    err = capsys.readouterr().err
    assert "cannot load the Kubernetes configuration" in err
    assert "Traceback" not in err


def test_an_unknown_item_is_named_with_those_there_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["chaos", "hardware-fault", "n1", "--item", "gpu.nope", "--kubeconfig", _unreachable(tmp_path)]
    assert main(argv) != 0
    err = capsys.readouterr().err
    assert "--item 'gpu.nope': not a check item; one of gpu.count, gpu.ecc" in err


def test_a_server_that_does_not_answer_is_said_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["node", "list", "--kubeconfig", _unreachable(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "listing the isolated nodes: cannot reach the API server" in err
    assert "Traceback" not in err
