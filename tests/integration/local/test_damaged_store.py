"""A damaged state file is named, not dumped: every command says which file, what is lost, and the command that
starts afresh (exit 2, no traceback); that command works, and the next command starts a new, empty store."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from trainguard.backends.local.records import JobRecord
from trainguard.backends.local.statefile import DamagedStore, StateError, check
from trainguard.backends.local.store import Store

from .harness import LocalRuntime, Result

pytestmark = pytest.mark.integration

#: What no message to a user may contain: a traceback or any piece of one.
TRACEBACK = re.compile(r'Traceback|File "|\.py", line')


def _store_with_jobs(path: Path) -> bytes:
    """A real state file holding a few jobs, all of it in the main file (checkpointed); returns its bytes."""
    store = Store(path)
    for index in range(20):
        status = {"phase": "Running", "message": "x" * 4000}
        store.insert_job(JobRecord(f"job-{index}", "uid", {"spec": {}}, 1, status, 1, 0.0, 40000 + index))
    store.file._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    data = path.read_bytes()
    path.unlink()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return data


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(64 * 1024))


def _truncated(path: Path) -> None:
    data = _store_with_jobs(path)
    path.write_bytes(data[: len(data) // 2])


def _header_only(path: Path) -> None:
    data = _store_with_jobs(path)
    path.write_bytes(data[:60])


def _overwritten_inside(path: Path) -> None:
    """Whole and readable at the start, garbage in the middle: found by the check, not by opening."""
    data = bytearray(_store_with_jobs(path))
    middle = len(data) // 2
    data[middle : middle + 8192] = os.urandom(8192)
    path.write_bytes(bytes(data))


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "something").write_text("a directory where the state file should be")


DAMAGE: list[tuple[str, Callable[[Path], None]]] = [
    ("garbage bytes", _garbage),
    ("truncated to half", _truncated),
    ("truncated inside its header", _header_only),
    ("overwritten in the middle", _overwritten_inside),
    ("a directory in its place", _directory),
]


def _no_traceback(result: Result) -> None:
    assert not TRACEBACK.search(result.out + result.err), result.err


@pytest.mark.parametrize("damage", [d for _, d in DAMAGE], ids=[name for name, _ in DAMAGE])
def test_a_damaged_store_is_named_and_moved_aside_by_the_command_it_prints(
    local: LocalRuntime, damage: Callable[[Path], None]
) -> None:
    state = local.home.ensure().state_db
    damage(state)
    (local.home.logs_dir / "old-job").mkdir(parents=True)
    (local.home.logs_dir / "old-job" / "old-job-worker-0.log").write_text("step 1\n")

    for argv in (["get"], ["get", "old-job"], ["delete", "old-job"]):
        result = local.cli_process(*argv)
        assert result.code == 2, (argv, result.out, result.err)
        _no_traceback(result)
        assert f"state file {state} is damaged" in result.err
        assert (
            "the jobs recorded in it (their specs, status, restart counts, history and events)" in result.err
        )
        assert f"The pods' logs are kept in {local.home.logs_dir}" in result.err
        assert "To start afresh" in result.err
    assert local.control_plane() is None  # none runs on a damaged store

    command = result.err.strip().splitlines()[-1].strip()
    assert re.fullmatch(r"mkdir \S+ && mv \S+( \S+)* \S+/", command), command
    assert shlex.split(command)[4] == str(state)
    subprocess.run(command, shell=True, check=True)
    aside = Path(shlex.split(command)[1])
    assert (aside / "state.db").exists()  # kept for a closer look
    assert not state.exists()

    fresh = local.cli_process("get")
    assert fresh.code == 0, fresh.err
    _no_traceback(fresh)
    assert local.call("get") == []
    assert (local.home.logs_dir / "old-job" / "old-job-worker-0.log").read_text() == "step 1\n"


def test_an_empty_state_file_is_a_new_store(local: LocalRuntime) -> None:
    """SQLite reads an empty file as a database with nothing in it (as a new state file is for a moment):
    nothing can have been lost from it, so it is used as it is."""
    state = local.home.ensure().state_db
    state.write_bytes(b"")
    result = local.cli_process("get")
    assert result.code == 0, result.err
    _no_traceback(result)
    assert local.call("get") == []
    assert state.stat().st_size > 0


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes a file of mode 0000 all the same")
def test_a_state_file_without_permission_is_named_and_left_alone(local: LocalRuntime) -> None:
    state = local.home.ensure().state_db
    state.write_bytes(_store_with_jobs(state))
    state.chmod(0)
    try:
        result = local.cli_process("get")
        assert result.code == 2, result.err
        _no_traceback(result)
        assert (
            f"cannot read and write the local runtime's state file {state} (permission denied)" in result.err
        )
        assert "its jobs are intact" in result.err
        assert f"chmod u+rw {state}" in result.err
    finally:
        state.chmod(0o600)
    assert local.cli_process("get").code == 0


def test_the_store_names_a_file_it_may_not_use_even_as_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, for a user the file's mode shuts out (root is not shut out, so that is played here)."""
    state = tmp_path / "state.db"
    state.write_bytes(_store_with_jobs(state))
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != state)
    with pytest.raises(StateError, match=r"permission denied\); its jobs are intact") as raised:
        Store(state)
    assert f"chmod u+rw {state}" in str(raised.value)
    assert not isinstance(raised.value, DamagedStore)
    with pytest.raises(StateError, match=r"permission denied"):
        check(state)
