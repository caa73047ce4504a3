"""Real PyTorch jobs on the local runtime: each test gets a private session (home, control plane, pods),
shut down at teardown, and fails if any process of it is left behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the PyTorch integration tests need torch (the project's 'torch' extra)")

from torch_harness import leftovers

from trainguard.demo.session import Session


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Session]:
    # Every process of the job can be asked for its Python stacks (SIGABRT: see torch_harness.stacks).
    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")
    with Session(tmp_path) as opened:
        yield opened
    left = leftovers(opened)
    assert not left, f"processes left behind: {left}"
