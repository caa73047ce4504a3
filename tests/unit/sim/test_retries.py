"""The simulator drives the controller as every driver does: a reconcile that raises is tried again after the
job's backoff (0.5 s, then 1 s, 2 s, ... of simulated time), one log line a step, the traceback once."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from trainguard.backends.sim import engine
from trainguard.controller.loop import StepResult

from .helpers import lost, run


def test_a_failing_reconcile_is_tried_again_after_its_backoff(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[float] = []
    real_step = engine.step

    def failing_three_times(*args: Any, **kwargs: Any) -> StepResult:
        calls.append(args[3])  # now
        if len(calls) <= 3:
            raise RuntimeError("the controller broke")
        return real_step(*args, **kwargs)

    baseline = lost(run())["startup"]
    monkeypatch.setattr(engine, "step", failing_three_times)
    caplog.set_level(logging.WARNING, "trainguard.backends.sim.engine")
    result = run()
    assert calls[:4] == [0.0, 0.5, 1.5, 3.5]
    assert lost(result)["startup"] == pytest.approx(baseline + 3.5)  # started 3.5 s late, no other change
    assert [(r.levelname, r.exc_info is not None) for r in caplog.records] == [
        ("ERROR", True),
        ("WARNING", False),
        ("WARNING", False),
    ]
    assert caplog.records[2].getMessage() == (
        "reconcile of job llm at 1.5 s failed again (3 in a row): RuntimeError: the controller broke; "
        "trying again in 2.0 s"
    )
