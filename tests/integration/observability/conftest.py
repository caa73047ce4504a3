"""Each test gets a local runtime in its own TRAINGUARD_HOME, stopped (with its pods) at teardown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from local.harness import LocalRuntime

from trainguard.backends.local.home import ENV_HOME


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalRuntime]:
    runtime = LocalRuntime(tmp_path)
    monkeypatch.setenv(ENV_HOME, str(runtime.home.root))
    monkeypatch.setenv("TRAINGUARD_IDLE_EXIT", "120")  # a control plane a crashed test leaves ends by itself
    monkeypatch.delenv("TRAINGUARD_METRICS_PORT", raising=False)
    yield runtime
    leftovers = runtime.stop()
    assert not leftovers, f"processes left behind: {leftovers}"
