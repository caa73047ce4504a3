"""Each SDK test starts as a plain ``python train.py``: no rank variables, no memory of an earlier world."""

from __future__ import annotations

import pytest

from trainguard.sdk import elasticity

_WORLD_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_RUN_ID",
    "TRAINGUARD_STATE_DIR",
)


@pytest.fixture(autouse=True)
def _plain_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _WORLD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(elasticity, "_last", None)
    # The identity of the run that memory snapshots carry (a test of identity sets its own).
    monkeypatch.setenv("TRAININGJOB_UID", "sdk-test-run")
