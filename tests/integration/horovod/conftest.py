"""Horovod comes from scripts/build-horovod (built from source and cached; scripts/test runs it). Without it
these tests fail, unless TRAINGUARD_SKIP_HOROVOD=1 says that skipping them is intended."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainguard.demo.session import Session


@pytest.fixture(autouse=True)
def _horovod_installed() -> None:
    if importlib.util.find_spec("horovod") is not None:
        return
    if os.environ.get("TRAINGUARD_SKIP_HOROVOD") == "1":
        pytest.skip("horovod is not installed and TRAINGUARD_SKIP_HOROVOD=1: Horovod tests skipped")
    pytest.fail(
        f"horovod is not installed in {sys.prefix}: run scripts/build-horovod (it builds Horovod once and "
        "caches the wheel), or set TRAINGUARD_SKIP_HOROVOD=1 to skip the Horovod tests"
    )


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    """A private local runtime, shut down at teardown; the test fails if any process of it is left behind."""
    from horovod_harness import leftovers

    with Session(tmp_path) as opened:
        yield opened
    left = leftovers(opened)
    assert not left, f"processes left behind: {left}"
