"""trainguard.Snapshots in one process: shared-memory slots, restoring what was saved, the fall-back to disk."""

from __future__ import annotations

import copy
import json
import logging
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainguard.sdk import _layout, _shm
from trainguard.sdk import snapshots as snapshots_module
from trainguard.sdk._buddy import Receiver as _Receiver
from trainguard.sdk._buddy import send as _send
from trainguard.sdk._disk import FALLBACK_DISK_EVERY, SKIPPED
from trainguard.sdk._snapplan import DISK, MEMORY
from trainguard.sdk.checkpoint import Checkpointer
from trainguard.sdk.snapshots import Snapshots

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
    """``save`` returns while the optimizer's tensors are still being copied (in the background); the next
    forward and backward run meanwhile, and ``optimizer.step()`` waits for the copy: the snapshot holds the
    state of the step saved."""
    copy_into = _layout.copy_into
    release, copied = threading.Event(), threading.Event()

    def held_in_the_background(address: int, copies: list[object], pool: object) -> None:
        background = threading.current_thread().name.startswith("trainguard-snapshot-copy")
        if background:
            release.wait(60)
        copy_into(address, copies, pool)
        if background:
            copied.set()

    monkeypatch.setattr(_layout, "copy_into", held_in_the_background)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.BatchNorm1d(256))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    snapshots = Snapshots(Checkpointer(tmp_path / "disk"), directory=tmp_path / "shm", optimizers=[optimizer])

    def state() -> dict[str, object]:
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

    def forward_and_backward() -> None:
        model(torch.randn(8, 256)).square().mean().backward()  # also moves BatchNorm's running statistics

    forward_and_backward()
    optimizer.step()
    optimizer.zero_grad()
    assert snapshots.save(state(), 1) == MEMORY
    expected = copy.deepcopy(state())
    # save() returned with the optimizer's tensors not copied yet: no snapshot of step 1 until they are.
    assert not copied.is_set()
    assert _shm.committed(snapshots._writer.directory) == []
    forward_and_backward()  # changes the buffers, copied before save returned
    stepped: list[bool] = []  # after Snapshots' pre-hook: whether the copy was done when the step went on
    optimizer.register_step_pre_hook(lambda *_: stepped.append(copied.is_set()))
    stepping = threading.Thread(target=optimizer.step)
    stepping.start()
    stepping.join(0.5)
    assert stepping.is_alive(), "optimizer.step() went on while its tensors were still being copied"
    assert stepped == []
    release.set()
    stepping.join(60)
    assert not stepping.is_alive()
    assert stepped == [True]
    optimizer.zero_grad()
    first = _shm.read_into_private(
        next(s for s in _shm.committed(snapshots._writer.directory) if s.step == 1)
    )
    assert _equal(first, expected)  # the state of step 1, not the parameters the next step changed
    assert not _equal(first["model"], model.state_dict())
    snapshots.save(state(), 2)
    snapshots.wait()
    restored = Snapshots(Checkpointer(tmp_path / "disk"), directory=tmp_path / "shm").restore()
    assert restored is not None
    assert restored.step == 2
    assert _equal(restored.state, state())
    snapshots.close()
    forward_and_backward()
    optimizer.step()  # the hooks are gone with close(): nothing left to wait for
    assert stepped == [True, True]


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
    size = _layout.layout({"model": model.state_dict(), "optimizer": optimizer.state_dict()}).size
    restored = snapshots.restore()
    assert restored is not None
    again = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64))
    again_optimizer = torch.optim.SGD(again.parameters(), lr=0.1, momentum=0.9)
    again.load_state_dict(restored.state["model"])
    again_optimizer.load_state_dict(restored.state["optimizer"])  # keeps the restored momentum tensors
    # Each momentum buffer is on a storage of its own, not a view of one buffer holding the whole snapshot,
    # which the next snapshot would copy whole (and which would stay alive for as long as the optimizer).
    assert (
        _layout.layout({"model": again.state_dict(), "optimizer": again_optimizer.state_dict()}).size == size
    )


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


# -- a slot is read only as the snapshot it was listed as ----------------------------------------------------


def _w(step: int) -> dict[str, object]:
    return {"w": torch.full((1024,), float(step))}


def test_a_slot_written_over_since_it_was_listed_is_not_read(tmp_path: Path) -> None:
    writer = _shm.SlotWriter(tmp_path / "own-me-0")

    def write(step: int) -> None:
        plan = _layout.layout(_w(step))

        def fill(address: int) -> None:
            _layout.copy_into(address, plan.copies, None)

        writer.write({"step": step, "skeleton": plan.skeleton}, fill, plan.size)

    write(1)
    (listed,) = _shm.committed(writer.directory)
    write(2)
    write(3)  # into the listed slot: the other one holds the newest
    assert _shm.slot_at(listed.meta_path).step == 3
    with pytest.raises(_shm.Replaced, match="step 1"):
        _shm.read_into_private(listed)
    with pytest.raises(FileNotFoundError):  # what the readers catch
        _shm.read_data(listed)
    assert _equal(_shm.read_into_private(_shm.committed(writer.directory)[0]), _w(3))
    write(4)
    (_, listed) = _shm.committed(writer.directory)  # step 3
    write(3)  # step 3 again, into its slot (step 4 is the newest): the same step, another snapshot
    assert _shm.slot_at(listed.meta_path).step == 3
    with pytest.raises(_shm.Replaced):
        _shm.read_into_private(listed)
    writer.close()


@pytest.mark.parametrize("written_over", ["after listing", "after finding the slot"])
def test_restore_fails_rather_than_read_another_step_than_the_one_chosen(
    snapshots: Snapshots, monkeypatch: pytest.MonkeyPatch, written_over: str
) -> None:
    """A writer writes steps 2 and 3 between restore's listing of step 1 (the step every rank chose) and its
    read: step 3's bytes are in step 1's slot. The read fails; a wrong state is never returned."""
    snapshots.save(_w(1), 1)
    done: list[bool] = []

    def write_over() -> None:
        if not done:
            done.append(True)
            snapshots.save(_w(2), 2)
            snapshots.save(_w(3), 3)

    if written_over == "after listing":
        held = snapshots._held

        def listed_then_written_over(*args: object, **kwargs: object) -> object:
            found = held(*args, **kwargs)  # type: ignore[arg-type]
            write_over()
            return found

        monkeypatch.setattr(snapshots, "_held", listed_then_written_over)
    else:
        slot_at = _shm.slot_at

        def found_then_written_over(meta_path: Path) -> _shm.Slot:
            slot = slot_at(meta_path)
            write_over()
            return slot

        monkeypatch.setattr(_shm, "slot_at", found_then_written_over)
    with pytest.raises(RuntimeError, match=r"snapshot of step 1 .* written over"):
        snapshots.restore()
    assert done
    restored = snapshots.restore()  # chosen again: the newest
    assert restored is not None
    assert restored.step == 3
    assert _equal(restored.state, _w(3))


def test_persisting_never_writes_a_checkpoint_of_one_step_holding_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The persist thread of step 1 starts late, once steps 2 and 3 are written (step 3 into step 1's slot):
    no checkpoint labelled 1 holding step 3's tensors; the next persist writes the newest."""
    persisting = Snapshots(Checkpointer(tmp_path / "disk"), directory=tmp_path / "shm", persist_every=1)
    queued: list[_shm.Slot] = []
    monkeypatch.setattr(persisting, "_persist", queued.append)
    for step in (1, 2, 3):
        persisting.save(_w(step), step)
    first, _, third = queued
    assert _shm.slot_at(first.meta_path).step == 3
    persisting._persist_slot(first)
    assert persisting.checkpointer.checkpoints() == []
    persisting._persist_slot(third)
    latest = persisting.checkpointer.load_latest()
    assert latest is not None
    assert latest.step == 3
    assert _equal(latest.state, _w(3))


def test_the_buddy_sender_never_sends_a_slot_written_over_since_it_was_listed(
    snapshots: Snapshots, tmp_path: Path
) -> None:
    snapshots.save(_w(1), 1)
    listed = snapshots._latest  # what the sender thread took to send
    assert listed is not None
    snapshots.save(_w(2), 2)
    snapshots.save(_w(3), 3)  # into the listed slot
    assert _shm.slot_at(listed.meta_path).step == 3
    node = tmp_path / "buddy-node"
    node.mkdir()
    receiver = _Receiver(node, "127.0.0.1", "token")
    try:
        with pytest.raises(FileNotFoundError):
            _send(receiver.address, "token", "me-0", listed)
        assert list(node.glob("buddy-*/slot-*")) == []  # nothing sent
        newest = snapshots._latest
        assert newest is not None
        _send(receiver.address, "token", "me-0", newest)
        (held,) = _shm.committed(node / "buddy-me-0")
        assert held.step == 3
        assert held.generation == newest.generation  # the sender's snapshot, as it is
        assert _equal(_shm.read_into_private(held), _w(3))
    finally:
        receiver.stop()


# -- a full tmpfs: no SIGBUS, disk instead -------------------------------------------------------------------

TMPFS_BYTES = 4 << 20


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 4 MB of its own: writing into a sparse mapping of it beyond that is a SIGBUS."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    try:
        command = ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES >> 20}m", "tmpfs", str(mount)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as error:
        pytest.skip(f"cannot mount a small tmpfs: {error}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs (needs root, or the right to mount): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True, check=False).returncode != 0:
            # Still mapped by a writer left open (a failed test): detached now, gone once unmapped.
            subprocess.run(["umount", "--lazy", str(mount)], check=False)


def _no_half_written_slot(root: Path) -> None:
    """Every data file under ``root`` is a committed snapshot's; the filesystem holds no more than those."""
    committed = 0
    for data in root.rglob("slot-*.data"):
        meta = _shm.slot_at(data.with_suffix(".meta"))  # a data file without its meta: a half-written slot
        assert data.stat().st_size == int(meta.meta["size"])
        committed += data.stat().st_size
    assert list(root.rglob("*.tmp")) == []
    stats = os.statvfs(root)
    used = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    assert used <= committed + (256 << 10), f"{used} bytes used, {committed} committed"


def _one_warning_naming(caplog: pytest.LogCaptureFixture, directory: Path) -> None:
    warnings = [
        r for r in caplog.records if r.name == snapshots_module.log.name and r.levelno >= logging.WARNING
    ]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert str(directory) in warnings[0].getMessage()
    assert "saving to disk" in warnings[0].getMessage()


@pytest.mark.parametrize("check", ["refuses it", "is passed"])
def test_a_state_bigger_than_the_tmpfs_goes_to_disk(
    small_tmpfs: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    check: str,
) -> None:
    """Refused by the free-space check; or past it (its figures stale: another writer took the room since),
    refused by the reservation of the slot's pages, where a write would have been a SIGBUS."""
    snapshots = Snapshots(Checkpointer(tmp_path / "disk"), directory=small_tmpfs)
    if check == "is passed":
        monkeypatch.setattr(_shm, "bytes_free", lambda directory: 1 << 40)
    big = {"w": torch.randn(6 << 18)}  # 6 MB
    with caplog.at_level(logging.WARNING, logger="trainguard.snapshots"):
        assert snapshots.save(big, 100) == DISK
        assert snapshots.save(big, 101) == SKIPPED  # to disk from now on, every FALLBACK_DISK_EVERY steps
    _one_warning_naming(caplog, small_tmpfs)
    snapshots.wait()
    latest = snapshots.checkpointer.load_latest()
    assert latest is not None
    assert latest.step == 100
    assert _equal(latest.state, big)
    _no_half_written_slot(small_tmpfs)
    snapshots.close()


def test_a_second_slot_that_does_not_fit_goes_to_disk_and_keeps_the_first(
    small_tmpfs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    snapshots = Snapshots(Checkpointer(tmp_path / "disk"), directory=small_tmpfs)
    state = {"w": torch.randn(3 << 17)}  # 1.5 MB: twice fits in 4 MB
    assert snapshots.save(state, 1) == MEMORY
    with open(small_tmpfs / "another-writer", "wb") as other:  # another rank of the node takes 2 MB
        os.posix_fallocate(other.fileno(), 0, 2 << 20)
    with caplog.at_level(logging.WARNING, logger="trainguard.snapshots"):
        assert snapshots.save(state, 2) == DISK
    _one_warning_naming(caplog, small_tmpfs)
    snapshots.wait()
    latest = snapshots.checkpointer.load_latest()
    assert latest is not None
    assert latest.step == 2
    assert [slot.step for slot in _shm.committed(snapshots._writer.directory)] == [1]  # still a snapshot
    (small_tmpfs / "another-writer").unlink()
    _no_half_written_slot(small_tmpfs)
    snapshots.close()


def test_in_place_a_region_whose_pages_are_not_there_goes_to_disk(
    small_tmpfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 1024)  # 4 MB of parameters, and as much momentum
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 1024)).sum().backward()
    optimizer.step()
    snapshots = Snapshots(Checkpointer(tmp_path / "disk"), directory=small_tmpfs, optimizers=[optimizer],
                          in_place=True)  # fmt: skip
    monkeypatch.setattr(_shm, "bytes_free", lambda directory: 1 << 40)  # past the check
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    expected = copy.deepcopy(state)
    with caplog.at_level(logging.WARNING, logger="trainguard.snapshots"):
        assert snapshots.save(state, 1) == DISK
    _one_warning_naming(caplog, small_tmpfs)
    live = snapshots._region
    assert live is not None
    assert live.offset_of(model.weight.untyped_storage().data_ptr()) is None  # not moved: training goes on
    optimizer.step()
    snapshots.wait()
    latest = snapshots.checkpointer.load_latest()
    assert latest is not None
    assert latest.step == 1
    assert _equal(latest.state, expected)
    _no_half_written_slot(small_tmpfs)
    snapshots.close()


@pytest.mark.parametrize("check", ["refuses it", "is passed"])
def test_a_buddy_with_no_room_answers_full(
    small_tmpfs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: str
) -> None:
    sender = Snapshots(Checkpointer(tmp_path / "disk"), directory=tmp_path / "shm")
    sender.save({"w": torch.randn(6 << 18)}, 1)
    slot = sender._latest
    assert slot is not None
    if check == "is passed":
        monkeypatch.setattr(_shm, "bytes_free", lambda directory: 1 << 40)
    receiver = _Receiver(small_tmpfs, "127.0.0.1", "token")
    try:
        # The receiver answers before it reads the data (it has no room for it): a sender's header and meta.
        with socket.create_connection(receiver.address, timeout=30) as conn:
            meta = slot.meta_bytes()
            header = {"token": "token", "key": "me-0", "meta": len(meta), "data": int(slot.meta["size"])}
            conn.sendall(json.dumps(header).encode() + b"\n" + meta)
            assert conn.makefile("rb").readline() == b"full\n"
        with pytest.raises(OSError, match=r"'full'|reset|[Bb]roken pipe"):  # the whole snapshot: refused too
            _send(receiver.address, "token", "me-0", slot)
    finally:
        receiver.stop()
    _no_half_written_slot(small_tmpfs)
    sender.close()


# -- the fall-back to disk keeps the steps' speed ------------------------------------------------------------


def test_once_memory_is_refused_every_persist_every_th_step_goes_to_disk_without_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    delay = 0.6
    checkpointer = Checkpointer(tmp_path / "disk", keep=100)
    write = checkpointer._write
    written: list[int] = []

    def slow_write(state: object, step: int) -> Path:
        time.sleep(delay)  # a slow disk
        written.append(step)
        return write(state, step)

    monkeypatch.setattr(checkpointer, "_write", slow_write)
    monkeypatch.setattr(_shm, "bytes_free", lambda directory: 1000)
    snapshots = Snapshots(checkpointer, directory=tmp_path / "shm", persist_every=5)
    assert snapshots.save(_w(0), 0) == DISK  # refused: this one goes to disk (and takes `delay`)
    returned: dict[int, str] = {}
    for step in range(1, 21):
        time.sleep(delay / 4)  # a training step
        started = time.monotonic()
        returned[step] = snapshots.save(_w(step), step)
        took = time.monotonic() - started
        assert took < delay / 2, f"save() of step {step} took {took:.2f} s: it waited for the disk"
    snapshots.wait()
    assert written[0] == 0
    assert set(written[1:]) <= {5, 10, 15, 20}
    assert len(written) > 1  # a write takes 0.6 s, five steps 0.75 s: most of the due ones were written
    assert {step for step, where in returned.items() if where == DISK} == set(written[1:])
    assert all(where == SKIPPED for step, where in returned.items() if step not in written)
    latest = checkpointer.load_latest()
    assert latest is not None
    assert _equal(latest.state, _w(written[-1]))


def test_once_memory_is_refused_without_persist_every_the_disk_gets_every_hundredth_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpointer = Checkpointer(tmp_path / "disk", keep=100)
    monkeypatch.setattr(_shm, "bytes_free", lambda directory: 1000)
    snapshots = Snapshots(checkpointer, directory=tmp_path / "shm")
    returned = {}
    for step in range(1, 2 * FALLBACK_DISK_EVERY + 2):
        returned[step] = snapshots.save(_w(step), step)
        checkpointer.wait()  # no write in flight at the next step
    assert FALLBACK_DISK_EVERY == 100
    assert [step for step, where in returned.items() if where == DISK] == [1, 100, 200]  # 1: the refused one
    assert [step for step, _ in checkpointer.checkpoints()] == [1, 100, 200]
    assert set(returned.values()) == {DISK, SKIPPED}
