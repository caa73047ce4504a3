"""trainguard.Snapshots in one process: shared-memory slots, restoring what was saved, the fall-back to disk."""

from __future__ import annotations

import copy
import logging
import threading
import time
from pathlib import Path

import pytest

from trainguard.sdk import _shm
from trainguard.sdk.checkpoint import Checkpointer
from trainguard.sdk.snapshots import DISK, MEMORY, Snapshots

torch = pytest.importorskip("torch")


def _state(seed: int) -> dict[str, object]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    shared = torch.arange(10.0)
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "views": [shared[:5], shared[5:]],  # two views of one storage
        "step": seed,
        "name": "run",
    }


def _equal(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return (
            type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=False))
        )
    return a == b


@pytest.fixture
def snapshots(tmp_path: Path) -> Snapshots:
    return Snapshots(Checkpointer(tmp_path / "disk"), directory=tmp_path / "shm")


def test_the_newest_snapshot_is_restored_equal_to_what_was_saved(
    snapshots: Snapshots, tmp_path: Path
) -> None:
    for step in (1, 2, 3):
        assert snapshots.save(_state(step), step) == MEMORY
    restored = Snapshots(Checkpointer(tmp_path / "disk"), directory=tmp_path / "shm").restore()
    assert restored is not None
    assert (restored.step, restored.source) == (3, MEMORY)
    assert _equal(restored.state, _state(3))
    assert restored.state["model"]._metadata == _state(3)["model"]._metadata  # type: ignore[attr-defined]
    views = restored.state["views"]
    assert views[0].untyped_storage().data_ptr() == views[1].untyped_storage().data_ptr()  # still shared


def test_restored_state_is_private_memory(snapshots: Snapshots, tmp_path: Path) -> None:
    snapshots.save({"w": torch.zeros(4)}, 1)
    restored = snapshots.restore()
    assert restored is not None
    restored.state["w"].fill_(9)
    again = snapshots.restore()
    assert again is not None
    assert torch.equal(again.state["w"], torch.zeros(4))


def test_two_slots_suffice_and_the_newest_is_never_written_over(snapshots: Snapshots) -> None:
    directory = snapshots._writer.directory
    for step in range(1, 6):
        snapshots.save({"w": torch.full((4,), float(step))}, step)
        slots = _shm.committed(directory)
        assert next(slot.step for slot in slots) == step
    assert sorted(p.name for p in directory.glob("slot-*.data")) == ["slot-0.data", "slot-1.data"]


def test_a_slot_being_read_is_not_written_over(snapshots: Snapshots) -> None:
    snapshots.save({"w": torch.full((4,), 1.0)}, 1)
    snapshots.save({"w": torch.full((4,), 2.0)}, 2)
    oldest = _shm.committed(snapshots._writer.directory)[-1]
    with oldest.reading():
        snapshots.save({"w": torch.full((4,), 3.0)}, 3)  # neither step 2 (newest) nor step 1 (read): a third
        assert _shm.slot_at(oldest.meta_path).step == 1
    assert len(list(snapshots._writer.directory.glob("slot-*.data"))) == 3


def test_a_slot_whose_write_did_not_finish_is_not_a_snapshot(snapshots: Snapshots) -> None:
    snapshots.save({"w": torch.ones(4)}, 1)

    def dies(address: int) -> None:
        raise KeyboardInterrupt  # the process killed in the middle of the copy

    with pytest.raises(KeyboardInterrupt):
        snapshots._writer.write({"step": 2}, dies, 16)
    assert [slot.step for slot in _shm.committed(snapshots._writer.directory)] == [1]
    (snapshots._writer.directory / "slot-9.meta").write_bytes(b"garbage")
    assert [slot.step for slot in _shm.committed(snapshots._writer.directory)] == [1]


def test_a_snapshot_that_does_not_fit_goes_to_disk_with_a_warning(
    snapshots: Snapshots, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_shm, "bytes_free", lambda directory: 1000)
    with caplog.at_level(logging.WARNING, logger="trainguard.snapshots"):
        assert snapshots.save({"w": torch.ones(1000)}, 4) == DISK
    assert "does not fit" in caplog.text
    snapshots.wait()
    restored = snapshots.restore()
    assert restored is not None
    assert (restored.step, restored.source) == (4, DISK)


def test_persist_every_writes_a_checkpoint_from_memory(snapshots: Snapshots, tmp_path: Path) -> None:
    persisting = Snapshots(Checkpointer(tmp_path / "disk"), directory=tmp_path / "shm", persist_every=2)
    persisting.save({"w": torch.ones(3)}, 1)
    persisting.save({"w": torch.full((3,), 2.0)}, 2)
    persisting.wait()
    assert [step for step, _ in persisting.checkpointer.checkpoints()] == [2]
    latest = persisting.checkpointer.load_latest()
    assert latest is not None
    assert torch.equal(latest.state["w"], torch.full((3,), 2.0))


def test_close_frees_the_memory(snapshots: Snapshots) -> None:
    snapshots.save({"w": torch.ones(3)}, 1)
    snapshots.close()
    assert not snapshots._writer.directory.exists()


def test_with_optimizers_the_copy_overlaps_the_next_step_and_holds_the_saved_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy_into = _shm.copy_into

    def slow_in_the_background(address: int, copies: list[object], pool: object) -> None:
        if threading.current_thread().name.startswith("trainguard-snapshot-copy"):
            time.sleep(0.3)  # the next step is well under way before the copy begins
        copy_into(address, copies, pool)

    monkeypatch.setattr(_shm, "copy_into", slow_in_the_background)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(2048, 2048), torch.nn.BatchNorm1d(2048)
    )  # 16 MB: a copy takes a while
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    snapshots = Snapshots(Checkpointer(tmp_path / "disk"), directory=tmp_path / "shm", optimizers=[optimizer])

    def state() -> dict[str, object]:
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

    def step() -> None:
        model(torch.randn(8, 2048)).square().mean().backward()  # also moves BatchNorm's running statistics
        optimizer.step()
        optimizer.zero_grad()

    step()
    snapshots.save(state(), 1)
    expected = copy.deepcopy(state())
    step()  # the forward changes buffers (copied before save returned), optimizer.step() waits for the rest
    snapshots.save(state(), 2)
    snapshots.wait()
    restored = Snapshots(Checkpointer(tmp_path / "disk"), directory=tmp_path / "shm").restore()
    assert restored is not None
    assert restored.step == 2
    first = _shm.read_into_private(
        next(s for s in _shm.committed(snapshots._writer.directory) if s.step == 1)
    )
    assert _equal(first, expected)
    assert _equal(restored.state, state())
    snapshots.close()
    step()  # the hooks are gone with close()


def test_stale_copies_are_pruned_and_nothing_else(tmp_path: Path) -> None:
    node = tmp_path / "node"
    now = 1_000_000.0

    def writer(name: str, step: int, age: float) -> Path:
        directory = node / name
        _shm.SlotWriter(directory).write({"step": step, "time": now - age}, lambda address: None, 8)
        return directory

    mine = writer("own-me-0", 100, 0)
    behind = writer("buddy-gone-0", 90, 60)  # a buddy that changed a while ago
    lagging = writer("buddy-slow-0", 90, 2)  # far behind but recent: a slow sender, kept
    close = writer("own-other-0", 98, 60)  # within STALE_STEPS: kept
    starting = node / "buddy-new-0"
    starting.mkdir()  # nothing committed yet: kept
    (node / "unrelated").mkdir()
    removed = _shm.prune_stale(node, 100, keep={mine}, now=now)
    assert removed == [behind]
    assert {p.name for p in node.iterdir()} == {
        "own-me-0",
        "buddy-slow-0",
        "own-other-0",
        "buddy-new-0",
        "unrelated",
    }
    assert lagging.exists()
    assert close.exists()


def test_a_restored_optimizer_does_not_hold_the_whole_snapshot(snapshots: Snapshots, tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 64)).sum().backward()
    optimizer.step()
    snapshots.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, 1)
    size = _shm.layout({"model": model.state_dict(), "optimizer": optimizer.state_dict()}).size
    restored = snapshots.restore()
    assert restored is not None
    again = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    again_optimizer = torch.optim.SGD(again.parameters(), lr=0.1, momentum=0.9)
    again.load_state_dict(restored.state["model"])
    again_optimizer.load_state_dict(restored.state["optimizer"])  # keeps the restored momentum tensors
    # Each momentum buffer is on a storage of its own, not a view of one buffer holding the whole snapshot,
    # which the next snapshot would copy whole (and which would stay alive for as long as the optimizer).
    assert _shm.layout({"model": again.state_dict(), "optimizer": again_optimizer.state_dict()}).size == size


@pytest.mark.parametrize(("replicated", "waits"), [(True, False), (False, True)])
def test_on_sigterm_only_a_shard_waits_for_its_buddy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replicated: bool, waits: bool
) -> None:
    """A stopping rank of a replicated state holds the same step as every other: it ends without waiting for
    its last snapshot to reach the buddy; a shard's only other copy is the buddy's, so it waits (bounded)."""
    snapshots = Snapshots(Checkpointer(tmp_path / "disk"), directory=tmp_path / "shm", replicated=replicated)
    waited: list[float] = []
    monkeypatch.setattr(snapshots, "wait_safe", lambda seconds: waited.append(seconds) or False)
    snapshots._save_final(_state(1), 7)
    assert snapshots.latest_step == 7
    assert bool(waited) is waits
    snapshots.close()
