"""A newcomer's warm-up (``trainguard.sdk._livestate.warm_up``), in this process: a warm-up that trains is
refused, one that fails is told and costs nothing, and what a failed warm-up made is let go inside the group it
ran in, before that group ends (a DDP's reducer never outlives its process group)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from trainguard.sdk import _livestate

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")


def _state() -> dict[str, Any]:
    model = torch.nn.Linear(4, 2)
    return {"model": model, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)}


@pytest.mark.parametrize("mode", ["steps", "raises"])
def test_what_a_failed_warm_up_made_is_gone_before_its_group_ends(
    mode: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _state()
    made: list[weakref.ref[Any]] = []
    alive_at_the_end: list[bool] = []
    destroy = dist.destroy_process_group

    def destroyed(*args: Any) -> None:
        gc.disable()  # nothing collected by chance: only what was let go by its last reference is gone
        try:
            alive_at_the_end.append(made[0]() is not None)
        finally:
            gc.enable()
        destroy(*args)

    monkeypatch.setattr(dist, "destroy_process_group", destroyed)

    def warmup() -> None:
        wrapped = torch.nn.parallel.DistributedDataParallel(state["model"], init_sync=False)
        made.append(weakref.ref(wrapped))
        wrapped(torch.randn(3, 4)).sum().backward()
        if mode == "steps":
            state["optimizer"].step()
        raise ValueError("a warm-up that fails")

    before = [p.detach().clone() for p in state["model"].parameters()]
    assert _livestate.warm_up(state, warmup, str) is None
    assert alive_at_the_end == [False]
    assert not dist.is_initialized()
    assert all(torch.equal(a, b) for a, b in zip(before, state["model"].parameters(), strict=True))
    assert all(p.grad is None or not p.grad.any() for p in state["model"].parameters())
    said = capsys.readouterr().err
    assert "the warm-up failed" in said
    assert ("stepped an optimizer" in said) == (mode == "steps")


def test_a_warm_up_that_runs_through_takes_its_seconds() -> None:
    state = _state()
    seconds = _livestate.warm_up(state, lambda: state["model"](torch.randn(3, 4)).sum().backward(), str)
    assert seconds is not None
    assert seconds >= 0
    assert all(p.grad is None or not p.grad.any() for p in state["model"].parameters())


def test_a_warm_up_whose_own_group_cannot_start_is_told_and_costs_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refused(*args: Any, **named: Any) -> None:
        raise RuntimeError("gloo: no interface")

    monkeypatch.setattr(dist, "init_process_group", refused)
    ran: list[bool] = []
    assert _livestate.warm_up(_state(), lambda: ran.append(True), str) is None
    assert ran == []
    assert "the warm-up failed (gloo: no interface)" in capsys.readouterr().err
