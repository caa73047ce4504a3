"""Checkpointer: atomic files, keep-N, falling back over corrupt files, async snapshots, who writes."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from trainguard.sdk.checkpoint import STALE_TMP_SECONDS, Checkpointer, CheckpointError

torch = pytest.importorskip("torch")


def state_of(value: float, size: int = 64) -> dict[str, Any]:
    return {"model": {"w": torch.full((size,), value)}, "epoch": int(value)}


def steps_on_disk(checkpointer: Checkpointer) -> list[int]:
    return [step for step, _ in checkpointer.checkpoints()]


def test_save_then_load_latest_returns_the_newest_state_and_its_step(tmp_path: Path) -> None:
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save(state_of(1.0), step=10)
    checkpointer.save(state_of(2.0), step=20)

    latest = checkpointer.load_latest()

    assert latest is not None
    assert latest.step == 20
    assert latest.path == tmp_path / "ckpt-000000000020.pt"
    assert torch.equal(latest.state["model"]["w"], torch.full((64,), 2.0))
    assert latest.state["epoch"] == 2


def test_an_empty_directory_has_no_checkpoint(tmp_path: Path) -> None:
    assert Checkpointer(tmp_path / "new").load_latest() is None


def test_only_the_newest_keep_checkpoints_remain(tmp_path: Path) -> None:
    checkpointer = Checkpointer(tmp_path, keep=2)
    for step in (1, 2, 3, 4, 5):
        checkpointer.save(state_of(step), step)
    assert steps_on_disk(checkpointer) == [4, 5]


def test_steps_order_numerically_not_by_name(tmp_path: Path) -> None:
    checkpointer = Checkpointer(tmp_path, keep=2)
    for step in (9, 10, 1_000_000_000_000, 99):
        checkpointer.save(state_of(1.0), step)
    assert steps_on_disk(checkpointer) == [99, 1_000_000_000_000]


def test_a_partial_temporary_file_never_shadows_a_good_checkpoint(tmp_path: Path) -> None:
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save(state_of(1.0), step=10)
    # What a writer killed mid-write leaves behind: half a newer checkpoint under its temporary name.
    whole = (tmp_path / "ckpt-000000000010.pt").read_bytes()
    (tmp_path / ".ckpt-000000000020.pt.4242-deadbeef.tmp").write_bytes(whole[: len(whole) // 2])

    latest = checkpointer.load_latest()

    assert latest is not None
    assert latest.step == 10
    assert steps_on_disk(checkpointer) == [10]


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _bit_rot(path: Path) -> None:
    """Bytes of the stored tensor change; the file still unpickles, only its zip CRC-32 tells."""
    data = bytearray(path.read_bytes())
    tensor_bytes = bytes(torch.full((64,), 2.0).numpy().tobytes())
    where = data.find(tensor_bytes)
    assert where > 0
    data[where] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "corrupt", [_truncate, _garbage, _empty, _bit_rot], ids=["truncated", "garbage", "empty", "bit-rot"]
)
def test_a_corrupt_latest_checkpoint_falls_back_to_the_previous_one(tmp_path: Path, corrupt: Any) -> None:
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save(state_of(1.0), step=10)
    checkpointer.save(state_of(2.0), step=20)
    corrupt(tmp_path / "ckpt-000000000020.pt")

    latest = checkpointer.load_latest()

    assert latest is not None
    assert latest.step == 10
    assert torch.equal(latest.state["model"]["w"], torch.full((64,), 1.0))
    # Set aside, so it no longer shadows good checkpoints nor takes a place among the kept ones.
    assert steps_on_disk(checkpointer) == [10]
    assert (tmp_path / "ckpt-000000000020.pt.corrupt").exists()


def test_a_file_with_a_checkpoint_name_but_other_content_is_skipped_not_removed(tmp_path: Path) -> None:
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save(state_of(1.0), step=10)
    torch.save({"something": "else"}, tmp_path / "ckpt-000000000020.pt")

    latest = checkpointer.load_latest()

    assert latest is not None
    assert latest.step == 10
    assert steps_on_disk(checkpointer) == [10, 20]


def test_every_checkpoint_corrupt_means_none(tmp_path: Path) -> None:
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save(state_of(1.0), step=10)
    _garbage(tmp_path / "ckpt-000000000010.pt")
    assert checkpointer.load_latest() is None


class Opaque:
    """Not a tensor, number or container: torch.load(weights_only=True) refuses it."""

    def __init__(self, value: int) -> None:
        self.value = value


def test_state_that_weights_only_refuses_is_an_error_naming_the_fix_not_a_silent_fallback(
    tmp_path: Path,
) -> None:
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save({"opaque": Opaque(7)}, step=1)

    with pytest.raises(CheckpointError, match=r"ckpt-000000000001\.pt.*weights_only=False"):
        checkpointer.load_latest()

    latest = checkpointer.load_latest(weights_only=False)
    assert latest is not None
    assert latest.state["opaque"].value == 7


def test_ranks_other_than_0_do_not_write_but_can_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Checkpointer(tmp_path).save(state_of(1.0), step=10)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    checkpointer = Checkpointer(tmp_path)

    assert checkpointer.save(state_of(2.0), step=20) is None
    assert checkpointer.save_async(state_of(2.0), step=20) is None
    checkpointer.wait()
    latest = checkpointer.load_latest()

    assert latest is not None
    assert latest.step == 10
    assert steps_on_disk(checkpointer) == [10]


def test_every_rank_writes_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    checkpointer = Checkpointer(tmp_path, rank0_only=False)
    assert checkpointer.save(state_of(1.0), step=3) == tmp_path / "ckpt-000000000003.pt"


def test_stale_temporary_files_are_removed_and_fresh_ones_kept(tmp_path: Path) -> None:
    stale = tmp_path / ".ckpt-000000000001.pt.1-aaaaaaaa.tmp"
    fresh = tmp_path / ".ckpt-000000000002.pt.2-bbbbbbbb.tmp"
    stale.write_bytes(b"partial")
    fresh.write_bytes(b"being written")
    long_ago = time.time() - STALE_TMP_SECONDS - 60
    os.utime(stale, (long_ago, long_ago))

    Checkpointer(tmp_path)

    assert not stale.exists()
    assert fresh.exists()


@pytest.mark.parametrize("step", [-1, 1.5, "3", True, None])
def test_a_step_must_be_a_non_negative_integer(tmp_path: Path, step: Any) -> None:
    with pytest.raises(ValueError, match="non-negative integer"):
        Checkpointer(tmp_path).save(state_of(1.0), step)


def test_keep_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep must be at least 1"):
        Checkpointer(tmp_path, keep=0)


# -- async ----------------------------------------------------------------------------------------------------


class GatedCheckpointer(Checkpointer):
    """Holds every write until the test opens the gate, and counts writes running at once."""

    def __init__(self, directory: Path, **kwargs: Any) -> None:
        super().__init__(directory, **kwargs)
        self.gate = threading.Event()
        self.running = 0
        self.most_running = 0
        self._count_lock = threading.Lock()

    def _write(self, state: Any, step: int) -> Path:
        with self._count_lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            assert self.gate.wait(timeout=30)
            return super()._write(state, step)
        finally:
            with self._count_lock:
                self.running -= 1


@pytest.mark.parametrize("reuse_memory", [True, False])
def test_changing_the_model_after_save_async_returns_does_not_change_what_is_written(
    tmp_path: Path, reuse_memory: bool
) -> None:
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(2, 8)).sum().backward()
    optimizer.step()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    momentum_before = optimizer.state_dict()["state"][0]["momentum_buffer"].clone()
    checkpointer = GatedCheckpointer(tmp_path, reuse_memory=reuse_memory)

    checkpointer.save_async({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, step=1)
    # Training goes on while the write has not even started.
    for _ in range(3):
        model(torch.ones(2, 8)).sum().backward()
        optimizer.step()
    with torch.no_grad():
        model.weight.fill_(123.0)
    checkpointer.gate.set()
    checkpointer.wait()

    latest = checkpointer.load_latest()
    assert latest is not None
    for name, tensor in before.items():
        assert torch.equal(latest.state["model"][name], tensor), name
    assert torch.equal(latest.state["optimizer"]["state"][0]["momentum_buffer"], momentum_before)
    assert not torch.equal(model.weight, before["weight"])


# 2M floats (8 MB) take the huge-page buffers of kept snapshots, 1000 the ordinary ones.
@pytest.mark.parametrize("elements", [1000, 2_000_000])
def test_async_saves_that_reuse_memory_each_write_their_own_state(tmp_path: Path, elements: int) -> None:
    checkpointer = Checkpointer(tmp_path, keep=10)
    weights = torch.zeros(elements)
    for step in range(1, 5):
        weights.fill_(step)
        checkpointer.save_async({"w": weights, "views": [weights[:10]]}, step)
    checkpointer.wait()

    assert len(checkpointer.checkpoints()) == 4
    for step, path in checkpointer.checkpoints():
        saved = torch.load(path)["state"]
        assert torch.equal(saved["w"], torch.full((elements,), float(step))), path
        assert torch.equal(saved["views"][0], torch.full((10,), float(step))), path


def test_the_snapshot_keeps_types_metadata_and_shared_storage(tmp_path: Path) -> None:
    shared = torch.arange(10.0)
    state = {"model": torch.nn.Linear(2, 2).state_dict(), "tied": [shared, shared[2:5]], "epoch": 3}
    checkpointer = Checkpointer(tmp_path)

    checkpointer.save_async(state, step=1)
    checkpointer.wait()

    latest = checkpointer.load_latest()
    assert latest is not None
    assert isinstance(latest.state["model"], OrderedDict)
    assert latest.state["model"]._metadata == state["model"]._metadata
    whole, view = latest.state["tied"]
    assert torch.equal(view, torch.tensor([2.0, 3.0, 4.0]))
    assert view.untyped_storage().data_ptr() == whole.untyped_storage().data_ptr()
    assert latest.state["epoch"] == 3


def test_at_most_one_write_is_in_flight(tmp_path: Path) -> None:
    checkpointer = GatedCheckpointer(tmp_path, keep=10)
    checkpointer.gate.set()
    for step in range(5):
        checkpointer.save_async(state_of(step, size=100_000), step)
    checkpointer.wait()
    assert checkpointer.most_running == 1
    assert steps_on_disk(checkpointer) == [0, 1, 2, 3, 4]


def test_a_failed_background_write_is_raised_by_wait_and_leaves_no_file(tmp_path: Path) -> None:
    checkpointer = Checkpointer(tmp_path)
    checkpointer.save_async({"unpicklable": lambda: None}, step=1)

    with pytest.raises(CheckpointError, match=r"ckpt-000000000001\.pt failed"):
        checkpointer.wait()

    checkpointer.wait()  # reported once
    assert os.listdir(tmp_path) == []
