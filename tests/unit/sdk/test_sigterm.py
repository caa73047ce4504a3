"""Checkpointer.save_on_sigterm: save the latest state, then end as the previous handler would."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from trainguard.sdk.checkpoint import Checkpointer

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _restore_sigterm() -> Iterator[None]:
    original = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, original)


def sigterm_self() -> None:
    # Python runs the handler in this (main) thread before the next bytecode after os.kill returns.
    os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_saves_the_current_state_then_exits_143(tmp_path: Path) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    checkpointer = Checkpointer(tmp_path)
    progress = {"step": 0, "w": torch.zeros(4)}
    checkpointer.save_on_sigterm(lambda: ({"w": progress["w"]}, progress["step"]))
    progress["step"] = 7
    progress["w"] = torch.full((4,), 7.0)

    with pytest.raises(SystemExit) as exited:
        sigterm_self()

    assert exited.value.code == 143
    latest = checkpointer.load_latest()
    assert latest is not None
    assert latest.step == 7
    assert torch.equal(latest.state["w"], torch.full((4,), 7.0))


def test_a_previous_python_handler_is_called_after_the_save_and_decides(tmp_path: Path) -> None:
    calls: list[tuple[int, bool]] = []

    def previous(signum: int, frame: FrameType | None) -> None:
        calls.append((signum, (tmp_path / "ckpt-000000000003.pt").exists()))

    signal.signal(signal.SIGTERM, previous)
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save_on_sigterm(lambda: ({"x": 1}, 3))

    sigterm_self()  # no SystemExit: the previous handler chose to carry on

    assert calls == [(signal.SIGTERM, True)]
    sigterm_self()  # and a later SIGTERM is handled again
    assert len(calls) == 2


def test_an_ignored_sigterm_stays_ignored_after_the_save(tmp_path: Path) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save_on_sigterm(lambda: ({"x": 1}, 5))

    sigterm_self()

    assert [step for step, _ in checkpointer.checkpoints()] == [5]


def test_a_sigterm_inside_defer_sigterm_is_handled_at_the_end_of_the_block(tmp_path: Path) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    checkpointer = Checkpointer(tmp_path)
    progress: dict[str, Any] = {"step": 0}
    checkpointer.save_on_sigterm(lambda: ({"step": progress["step"]}, progress["step"]))
    saved_inside: list[bool] = []

    def one_step() -> None:
        with checkpointer.defer_sigterm():
            progress["step"] = 1  # half a step: the signal must not save it
            sigterm_self()
            saved_inside.append(bool(checkpointer.checkpoints()))
            progress["step"] = 2

    with pytest.raises(SystemExit) as exited:
        one_step()

    assert saved_inside == [False]
    assert exited.value.code == 143
    latest = checkpointer.load_latest()
    assert latest is not None
    assert latest.step == 2


def test_ranks_that_do_not_write_exit_without_saving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save_on_sigterm(lambda: ({"x": 1}, 5))

    with pytest.raises(SystemExit):
        sigterm_self()

    assert checkpointer.checkpoints() == []
