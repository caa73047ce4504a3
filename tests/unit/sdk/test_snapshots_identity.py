"""A snapshot says whose it is: the run that wrote it and the structure of its state. Another run's snapshot,
or one of another shape, is never restored: it is passed over with a warning that names it and says why."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from trainguard.sdk import _layout, _shm
from trainguard.sdk._snapplan import MEMORY
from trainguard.sdk.checkpoint import Checkpointer
from trainguard.sdk.snapshots import Snapshots, run_identity

torch = pytest.importorskip("torch")


def _model(width: int) -> tuple[object, object]:
    torch.manual_seed(width)
    model = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.ReLU(), torch.nn.Linear(width, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    return model, optimizer


def _trained(width: int) -> dict[str, object]:
    model, optimizer = _model(width)
    model(torch.randn(2, 8)).sum().backward()  # type: ignore[operator]
    optimizer.step()  # type: ignore[attr-defined]
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}  # type: ignore[attr-defined]


def _fresh(width: int) -> dict[str, object]:
    """What a script's state is before its first step: no optimizer state yet."""
    model, optimizer = _model(width)
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}  # type: ignore[attr-defined]


def _snapshots(root: Path, run: str) -> Snapshots:
    return Snapshots(Checkpointer(root / "disk"), directory=root / "shm", run_id=run)


def test_a_second_run_with_another_model_resumes_nothing_of_the_first_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = _snapshots(tmp_path, "run-a")
    for step in (1, 2, 3):
        assert first.save(_trained(16), step) == MEMORY
    first.close(free=False)
    caplog.set_level(logging.WARNING, "trainguard.snapshots")
    second = _snapshots(tmp_path, "run-b")
    assert second.restore(like=_fresh(32)) is None
    warned = [r.getMessage() for r in caplog.records if "not resuming" in r.getMessage()]
    assert len(warned) == 1, warned  # one warning for the writer, not one per slot
    assert "step 3" in warned[0]
    assert "own-" in warned[0]
    assert "run 'run-a', this is run 'run-b'" in warned[0]


def test_the_same_run_with_another_shape_resumes_nothing_and_says_which_tensor(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _snapshots(tmp_path, "run-a").save(_trained(16), 1)
    caplog.set_level(logging.WARNING, "trainguard.snapshots")
    assert _snapshots(tmp_path, "run-a").restore(like=_fresh(32)) is None
    assert any("its /model/0.bias is float32 [16], the state's is float32 [32]" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_the_same_run_and_shape_resumes_before_the_optimizer_has_state(tmp_path: Path) -> None:
    saved = _trained(16)
    _snapshots(tmp_path, "run-a").save(saved, 7)
    restored = _snapshots(tmp_path, "run-a").restore(like=_fresh(16))
    assert restored is not None
    assert restored.step == 7
    assert torch.equal(restored.state["model"]["0.weight"], saved["model"]["0.weight"])  # type: ignore[index]


def test_another_runs_stale_snapshot_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _snapshots(tmp_path, "run-a")
    old.save(_trained(16), 1)
    old.close(free=False)
    written = old._writer.directory
    assert written.exists()
    later = time.time() + _shm.STALE_SECONDS + 1
    monkeypatch.setattr(time, "time", lambda: later)
    assert _snapshots(tmp_path, "run-b").restore() is None
    assert not written.exists()


def test_another_runs_fresh_snapshot_is_kept(tmp_path: Path) -> None:
    """A snapshot written just now may be another job's that shares the directory: passed over, not removed."""
    other = _snapshots(tmp_path, "run-a")
    other.save(_trained(16), 1)
    assert _snapshots(tmp_path, "run-b").restore() is None
    assert _shm.committed(other._writer.directory)


@pytest.mark.parametrize(
    ("given", "environment", "expected"),
    [
        ("mine", {"TRAININGJOB_UID": "uid", "TORCHELASTIC_RUN_ID": "rdzv"}, "mine"),
        (None, {"TRAININGJOB_UID": "uid", "TORCHELASTIC_RUN_ID": "rdzv"}, "uid"),
        (None, {"TORCHELASTIC_RUN_ID": "rdzv"}, "rdzv"),
        (None, {"TRAININGJOB_UID": " ", "TORCHELASTIC_RUN_ID": "rdzv"}, "rdzv"),
    ],
)
def test_the_identity_of_the_run(
    given: str | None, environment: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TRAININGJOB_UID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert run_identity(given) == expected


@pytest.mark.parametrize("environment", [{}, {"TORCHELASTIC_RUN_ID": "none"}, {"TORCHELASTIC_RUN_ID": ""}])
def test_without_an_identity_the_sdk_asks_for_one(
    environment: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("TRAININGJOB_UID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=r"run_id=.*--rdzv-id"):
        Snapshots(Checkpointer(tmp_path / "disk"), directory=tmp_path / "shm")


@pytest.mark.parametrize(
    ("saved", "like", "why"),
    [
        ({"w": torch.zeros(2, 3)}, {"w": torch.ones(2, 3)}, ""),
        ({"w": torch.zeros(2, 3), "m": torch.zeros(2)}, {"w": torch.ones(2, 3)}, ""),
        ({"w": torch.zeros(2, 3)}, {"w": torch.ones(3, 2)}, "its /w is float32 [2, 3], the state's is float32 [3, 2]"),
        ({"w": torch.zeros(2)}, {"w": torch.zeros(2, dtype=torch.float64)}, "its /w is float32 [2], the state's is float64 [2]"),
        ({"w": torch.zeros(2)}, {"v": torch.zeros(2)}, "it has no tensor /v"),
        ({"l": [torch.zeros(1)]}, {"l": [torch.zeros(1), torch.zeros(1)]}, "it has no tensor /l/1"),
    ],
)  # fmt: skip
def test_what_fits(saved: dict[str, object], like: dict[str, object], why: str) -> None:
    assert _layout.fits(_layout.layout(saved).skeleton, _layout.layout(like).skeleton) == why
