"""``benchmarks/recovery.py``'s summary: live mode's replacement back in a whole world, warm against cold."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).parents[3] / "benchmarks"


def _recovery(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # its own imports (``_results``)
    spec = importlib.util.spec_from_file_location("recovery_benchmark", BENCHMARKS / "recovery.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


def test_the_replacements_return_is_summed_up_warm_against_cold(monkeypatch: pytest.MonkeyPatch) -> None:
    recovery = _recovery(monkeypatch)
    trial = recovery.Trial
    figures = recovery.summary(
        {
            "torchrun": [trial(False, None, None)],
            "torchrun_fixed": [trial(True, 8.0, 5), trial(True, 9.0, 5)],
            "trainguard": [trial(True, 2.0, 5), trial(True, 2.5, 5)],
            "trainguard_live": [trial(True, 0.3, 0, True, 0.5), trial(True, 0.4, 0, True, None)],
            "trainguard_live_cold": [trial(True, 0.3, 0, True, 3.0), trial(True, 0.2, 0, True, 4.0)],
        }
    )
    assert figures["trainguard_live"]["rejoined_s"] == [0.5, None]  # a world never whole again: no figure
    assert figures["trainguard_live"]["median_rejoined_s"] == 0.5
    assert figures["trainguard_live_cold"]["median_rejoined_s"] == 3.5
    assert figures["ratio_rejoined_warm_cold"] == 0.14
    assert "rejoined_s" not in figures["trainguard"]
    assert figures["target_live_met"]  # 0.35 s over 8.5 s
    assert figures["ratio"] is None  # plain torchrun never recovered
