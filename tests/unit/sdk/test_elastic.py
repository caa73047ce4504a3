"""elastic(): the worker's place in the job, from the environment or torch.distributed, and world changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainguard.sdk import elasticity
from trainguard.sdk.elasticity import elastic


def torchrun_env(
    monkeypatch: pytest.MonkeyPatch,
    *,
    rank: int,
    world: int,
    restart: int,
    nodes: int = 1,
    local_rank: int = 0,
) -> None:
    for name, value in {
        "RANK": rank,
        "LOCAL_RANK": local_rank,
        "WORLD_SIZE": world,
        "GROUP_WORLD_SIZE": nodes,
        "TORCHELASTIC_RESTART_COUNT": restart,
    }.items():
        monkeypatch.setenv(name, str(value))


def new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a worker restarted by torchrun starts with: nothing in memory."""
    monkeypatch.setattr(elasticity, "_last", None)


def test_a_plain_python_process_is_rank_0_of_a_world_of_1() -> None:
    info = elastic()
    assert (info.rank, info.local_rank, info.world_size, info.group_world_size) == (0, 0, 1, 1)
    assert info.restart_count == 0
    assert info.world_changed is False
    assert info.previous_world_size is None


def test_torchrun_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    torchrun_env(monkeypatch, rank=5, world=8, restart=2, nodes=2, local_rank=1)
    info = elastic()
    assert (info.rank, info.local_rank, info.world_size, info.group_world_size) == (5, 1, 8, 2)
    assert info.restart_count == 2


def test_a_change_of_world_is_reported_once_by_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    torchrun_env(monkeypatch, rank=0, world=4, restart=0)
    assert elastic().world_changed is False
    assert elastic().world_changed is False

    monkeypatch.setenv("WORLD_SIZE", "3")
    changed = elastic()
    assert changed.world_changed is True
    assert changed.previous_world_size == 4
    assert elastic().world_changed is False

    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")  # same workers, other nodes
    assert elastic().world_changed is True


def test_a_change_across_a_torchrun_restart_is_reported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job/uid 1")
    monkeypatch.setenv("TRAINGUARD_STATE_DIR", str(tmp_path))
    torchrun_env(monkeypatch, rank=1, world=4, restart=0)
    assert elastic().world_changed is False

    new_process(monkeypatch)
    torchrun_env(monkeypatch, rank=1, world=3, restart=1)
    after_resize = elastic()
    assert after_resize.world_changed is True
    assert after_resize.previous_world_size == 4

    new_process(monkeypatch)
    torchrun_env(monkeypatch, rank=1, world=3, restart=2)
    assert elastic().world_changed is False


def test_a_new_run_does_not_compare_itself_with_an_old_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's default id, shared by unrelated runs
    monkeypatch.setenv("TRAINGUARD_STATE_DIR", str(tmp_path))
    torchrun_env(monkeypatch, rank=0, world=4, restart=3)
    elastic()

    new_process(monkeypatch)
    torchrun_env(monkeypatch, rank=0, world=2, restart=0)
    info = elastic()
    assert info.world_changed is False
    assert info.previous_world_size is None


def test_a_variable_that_is_not_a_number_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "three")
    with pytest.raises(ValueError, match=r"WORLD_SIZE='three' is not an integer"):
        elastic()


def test_an_initialized_process_group_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    torchrun_env(monkeypatch, rank=3, world=4, restart=0)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        info = elastic()
    finally:
        dist.destroy_process_group()
    assert torch.distributed.is_available()
    assert (info.rank, info.world_size) == (0, 1)
