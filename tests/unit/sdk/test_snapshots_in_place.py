"""``Snapshots(in_place=True)`` in one process: the optimizers' tensors live in shared memory, a snapshot is
valid from its save to the next optimizer step, and what is restored is what was saved."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from trainguard.sdk import _shm
from trainguard.sdk._snapplan import DISK, MEMORY
from trainguard.sdk.checkpoint import Checkpointer
from trainguard.sdk.snapshots import Snapshots

from .test_snapshots import _equal

torch = pytest.importorskip("torch")


class Trainer:
    """A small model with BatchNorm (a buffer outside the optimizer) and SGD with momentum."""

    def __init__(self, root: Path, seed: int = 0, persist_every: int = 0) -> None:
        torch.manual_seed(seed)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32), torch.nn.Linear(32, 4)
        )
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.snapshots = Snapshots(
            Checkpointer(root / "disk"),
            directory=root / "shm",
            optimizers=[self.optimizer],
            in_place=True,
            persist_every=persist_every,
        )

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "note": "x"}

    def step(self) -> None:
        self.model(torch.randn(8, 64)).square().mean().backward()
        self.optimizer.step()
        self.optimizer.zero_grad()


def _restore(root: Path) -> Any:
    return Snapshots(Checkpointer(root / "disk"), directory=root / "shm").restore()


def test_the_optimizers_tensors_move_into_shared_memory_and_keep_their_identity(tmp_path: Path) -> None:
    trainer = Trainer(tmp_path)
    params = list(trainer.model.parameters())
    trainer.step()
    before = copy.deepcopy(trainer.state())
    assert trainer.snapshots.save(trainer.state(), 1) == MEMORY
    live = trainer.snapshots._region
    assert live is not None
    kept = params + [s["momentum_buffer"] for s in trainer.optimizer.state.values()]
    assert all(live.offset_of(t.untyped_storage().data_ptr()) is not None for t in kept)
    assert list(trainer.model.parameters()) == params  # the same objects, now viewing the file
    assert all(trainer.optimizer.state[p]["momentum_buffer"] is not None for p in params)
    assert _equal(trainer.state(), before)  # values unchanged by the move
    trainer.step()  # training goes on in place
    trainer.snapshots.save(trainer.state(), 2)
    restored = _restore(tmp_path)
    assert (restored.step, restored.source) == (2, MEMORY)
    assert _equal(restored.state, trainer.state())


def test_a_snapshot_is_valid_from_its_save_to_the_next_optimizer_step(tmp_path: Path) -> None:
    trainer = Trainer(tmp_path)
    trainer.step()
    trainer.snapshots.save(trainer.state(), 1)
    saved = copy.deepcopy(trainer.state())
    trainer.model(torch.randn(8, 64)).square().mean().backward()  # forward and backward change no kept tensor
    restored = _restore(tmp_path)
    assert restored.step == 1
    assert _equal(restored.state["optimizer"], saved["optimizer"])
    trainer.optimizer.step()  # the pre-hook: the region changes now, so it holds no snapshot
    assert _restore(tmp_path) is None  # nothing in memory, nothing on disk: a fresh start, never a torn state
    trainer.optimizer.zero_grad()
    trainer.snapshots.save(trainer.state(), 2)
    restored = _restore(tmp_path)
    assert restored.step == 2
    assert _equal(restored.state, trainer.state())


def test_new_optimizer_state_and_a_grown_rest_move_the_region(tmp_path: Path) -> None:
    trainer = Trainer(tmp_path)
    trainer.snapshots.save(trainer.state(), 0)  # no momentum yet: only the parameters are kept
    live = trainer.snapshots._region
    assert live is not None
    first = live.data_path
    trainer.step()  # SGD creates its momentum buffers
    trainer.snapshots.save(trainer.state(), 1)
    assert live.data_path != first
    assert not first.exists()
    assert _equal(_restore(tmp_path).state, trainer.state())
    second = live.data_path
    big = {**trainer.state(), "extra": torch.randn(1 << 19)}  # 2 MB more than the tail has room for
    trainer.snapshots.save(big, 2)
    assert live.data_path != second
    assert _equal(_restore(tmp_path).state, big)


def test_a_state_taken_before_the_move_is_saved_as_it_was(tmp_path: Path) -> None:
    trainer = Trainer(tmp_path)
    trainer.step()
    state = trainer.state()  # its tensors still name the private memory the parameters leave
    expected = copy.deepcopy(state)
    trainer.snapshots.save(state, 1)
    assert _equal(_restore(tmp_path).state, expected)
    live = trainer.snapshots._region
    assert live is not None
    assert len(list(live.directory.glob("slot-*.data"))) == 1
    assert _shm.tree_size(live.directory) == live.size


def test_a_later_process_keeps_the_earlier_ones_snapshot_until_it_has_one_of_its_own(tmp_path: Path) -> None:
    first = Trainer(tmp_path, seed=0)
    first.step()
    first.snapshots.save(first.state(), 5)
    saved = copy.deepcopy(first.state())
    first.snapshots.close(free=False)  # as a killed worker leaves it
    second = Trainer(tmp_path, seed=1)
    restored = second.snapshots.restore()
    assert (restored.step, restored.source) == (5, MEMORY)
    assert _equal(restored.state, saved)
    second.model.load_state_dict(restored.state["model"])
    second.optimizer.load_state_dict(restored.state["optimizer"])
    assert _restore(tmp_path).step == 5  # loading changed nothing in shared memory
    second.step()
    second.snapshots.save(second.state(), 6)
    live = second.snapshots._region
    assert live is not None
    assert [p.name for p in sorted(live.directory.glob("slot-*"))] == [
        live.data_path.name,
        live.data_path.name.replace(".data", ".meta"),
    ]
    assert _restore(tmp_path).step == 6


def test_persist_every_writes_the_saved_step_to_disk(tmp_path: Path) -> None:
    trainer = Trainer(tmp_path, persist_every=2)
    for step in (1, 2, 3):
        trainer.step()
        trainer.snapshots.save(trainer.state(), step)
        if step == 2:
            expected = copy.deepcopy(trainer.state())
    trainer.snapshots.wait()
    latest = trainer.snapshots.checkpointer.load_latest()
    assert latest is not None
    assert latest.step == 2
    assert _equal(latest.state, expected)


def test_close_frees_the_region(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = Trainer(tmp_path)
    trainer.step()
    trainer.snapshots.save(trainer.state(), 1)
    live = trainer.snapshots._region
    assert live is not None
    trainer.snapshots.close()
    assert list((tmp_path / "shm").iterdir()) == []
    # The parameters still work (the mapping lives while they use it): a step changes them as it changes a
    # copy of them in private memory. The hooks are gone: the step leaves the (closed) region alone.
    twin = copy.deepcopy({"model": trainer.model, "optimizer": trainer.optimizer})
    model, optimizer = twin["model"], twin["optimizer"]
    assert live.offset_of(trainer.model[0].weight.untyped_storage().data_ptr()) is not None  # in the file
    dirtied: list[bool] = []
    monkeypatch.setattr(live, "dirty", lambda: dirtied.append(True))
    before = copy.deepcopy(trainer.model.state_dict())
    inputs = torch.randn(8, 64)
    for trained, its_optimizer in ((trainer.model, trainer.optimizer), (model, optimizer)):
        trained(inputs).square().mean().backward()
        its_optimizer.step()
        its_optimizer.zero_grad()
    assert dirtied == []
    assert not _equal(trainer.model.state_dict(), before)
    assert _equal(trainer.model.state_dict(), model.state_dict())
    assert _equal(trainer.optimizer.state_dict(), optimizer.state_dict())


def test_a_region_that_does_not_fit_goes_to_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = Trainer(tmp_path)
    monkeypatch.setattr(_shm, "bytes_free", lambda directory: 1 << 10)
    trainer.step()
    assert trainer.snapshots.save(trainer.state(), 1) == DISK
    trainer.snapshots.wait()
    assert trainer.snapshots.checkpointer.load_latest().step == 1


@pytest.mark.parametrize(
    ("arguments", "words"),
    [({}, "needs optimizers"), ({"replicated": False}, "needs replicated=True")],
)
def test_in_place_needs_optimizers_and_a_replicated_state(
    tmp_path: Path, arguments: dict[str, Any], words: str
) -> None:
    model = torch.nn.Linear(2, 2)
    optimizers = [] if not arguments else [torch.optim.SGD(model.parameters(), lr=0.1)]
    with pytest.raises(ValueError, match=words):
        Snapshots(Checkpointer(tmp_path), directory=tmp_path / "shm", optimizers=optimizers, in_place=True,
                  **arguments)  # fmt: skip
