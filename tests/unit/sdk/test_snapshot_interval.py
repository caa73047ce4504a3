"""How far apart a GPU state's snapshots are (``_devicecopy.DeviceCopy.interval``) and which steps ``save``
snapshots (``Snapshots._due``): the decision is pure arithmetic on the copy's and the step's measured times, so
it is tested here without a GPU; the copies themselves run in ``benchmarks/gpu_snapshots.py`` on one."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from trainguard.sdk._devicecopy import DIRECT, STAGED, DeviceCopy
from trainguard.sdk._gpusnapshots import DECIDE_AFTER
from trainguard.sdk.checkpoint import Checkpointer
from trainguard.sdk.snapshots import Snapshots

pytest.importorskip("torch")


@pytest.mark.parametrize(
    ("mode", "copy_s", "step_s", "every"),
    [
        (STAGED, 0.010, 0.050, 1),  # the copy hides behind one step
        (STAGED, 0.050, 0.050, 2),  # exactly one step's time: the margin asks for two
        (STAGED, 0.226, 0.042, 7),  # the H200's 1 B model
        (STAGED, 0.024, 0.0035, 9),  # the H200's 100 M model
        (DIRECT, 0.010, 0.050, 5),  # none of it hides: at most 5 % of the steps (with the margin)
        (DIRECT, 0.226, 0.042, 130),
        (STAGED, 0.5, 0.0, 1),  # no step time measured: every step
    ],
)
def test_the_interval_is_the_smallest_that_hides_the_copy_or_keeps_it_under_the_budget(
    mode: str, copy_s: float, step_s: float, every: int
) -> None:
    device = DeviceCopy()
    device.mode = mode
    assert device.interval(copy_s, step_s) == every


class _FakeDevice(DeviceCopy):
    """A GPU copier's decision without a GPU: staged, and the copy already done."""

    def __init__(self) -> None:
        super().__init__()
        self.mode = STAGED


def _gpu_like(
    snapshots: Snapshots, monkeypatch: pytest.MonkeyPatch, copy_s: float, clock: list[float]
) -> None:
    """Make ``snapshots`` decide as for a GPU state whose copy took ``copy_s``, on the clock ``clock``."""
    snapshots._device = _FakeDevice()
    saved: list[int] = []

    def save(state: Any, step: int, last: bool = False) -> str:
        snapshots._on_device = True
        snapshots._copy_seconds = copy_s
        saved.append(step)
        return "memory"

    monkeypatch.setattr(snapshots, "_save", save)
    monkeypatch.setattr("trainguard.sdk.snapshots.time.perf_counter", lambda: clock[0])
    snapshots.saved = saved  # type: ignore[attr-defined]


def test_a_gpu_state_is_snapshotted_every_k_steps_chosen_once_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    snapshots = Snapshots(Checkpointer(tmp_path / "disk"), directory=tmp_path / "shm")
    clock = [0.0]
    _gpu_like(snapshots, monkeypatch, copy_s=0.2, clock=clock)
    caplog.set_level(logging.WARNING, "trainguard.snapshots")
    results = []
    for step in range(11, 40):
        results.append(snapshots.save({}, step))
        clock[0] += 0.05
    # The first snapshot at once; the interval chosen DECIDE_AFTER steps later: ceil(1.2 * 0.2 / 0.05) = 5.
    assert snapshots.every == 5
    assert snapshots.saved == [11] + [s for s in range(11 + DECIDE_AFTER, 40) if s % 5 == 0]  # type: ignore[attr-defined]
    assert results.count("skipped") == 29 - len(snapshots.saved)  # type: ignore[attr-defined]
    decided = [r.getMessage() for r in caplog.records if "every" in r.getMessage()]
    assert decided == ["snapshots of this GPU state every 5 steps (staged copy of 200 ms, step of 50.0 ms); "
                       "set Snapshots(every=...) to choose"]  # fmt: skip


def test_every_given_is_kept_and_a_cpu_state_is_snapshotted_every_step(tmp_path: Path) -> None:
    given = Snapshots(Checkpointer(tmp_path / "a"), directory=tmp_path / "a-shm", every=3)
    assert [given.save({"w": 1}, step) for step in range(1, 7)] == ["skipped", "skipped", "memory"] * 2
    assert given.every == 3
    plain = Snapshots(Checkpointer(tmp_path / "b"), directory=tmp_path / "b-shm")
    assert plain.every is None  # nothing saved yet
    assert [plain.save({"w": 1}, step) for step in range(1, 7)] == ["memory"] * 6
    assert plain.every == 1
    assert plain.copy_mode == "cpu"


def test_every_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"every=0"):
        Snapshots(Checkpointer(tmp_path), directory=tmp_path / "shm", every=0)
