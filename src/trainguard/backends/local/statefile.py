"""The local state file: one SQLite file in WAL mode, its tables (and how older files are brought to them),
its transactions and compare-and-swap writes, and what is said when the file is damaged.

Every update names the version it read (``WHERE version = ?``). When another writer got there first the
update changes no row and raises ``Conflict``: the caller re-reads and decides again, never overwrites.
Several processes (the control plane, CLI commands, tests) may open the same file at once.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    uid TEXT NOT NULL,
    spec TEXT NOT NULL,
    spec_version INTEGER NOT NULL,
    status TEXT NOT NULL,
    status_version INTEGER NOT NULL,
    created_at REAL NOT NULL,
    port INTEGER NOT NULL,
    nodes_wanted INTEGER,
    workdir TEXT NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS pods (
    name TEXT PRIMARY KEY,
    job TEXT NOT NULL,
    role TEXT NOT NULL,
    idx INTEGER NOT NULL,
    node TEXT NOT NULL,
    state TEXT NOT NULL,
    launch INTEGER NOT NULL,
    restarts INTEGER NOT NULL,
    pid INTEGER,
    create_time REAL,
    exit_code INTEGER,
    signal INTEGER,
    reason TEXT,
    started_at REAL,
    finished_at REAL,
    deleted_by_us INTEGER NOT NULL,
    in_place_acked INTEGER NOT NULL,
    stop_deadline REAL,
    avoid TEXT NOT NULL,
    injected TEXT NOT NULL,
    version INTEGER NOT NULL,
    launch_spec TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS pods_by_job ON pods (job);
CREATE TABLE IF NOT EXISTS nodes (
    name TEXT PRIMARY KEY,
    slots INTEGER NOT NULL,
    ready INTEGER NOT NULL,
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    at REAL NOT NULL,
    type TEXT NOT NULL,
    reason TEXT NOT NULL,
    object TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_job ON events (job, id);
CREATE TABLE IF NOT EXISTS scale_requests (
    id TEXT PRIMARY KEY,
    job TEXT NOT NULL,
    role TEXT NOT NULL,
    replicas INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS applied (
    key TEXT PRIMARY KEY,
    job TEXT NOT NULL,
    at REAL NOT NULL
);
"""


#: Bumped whenever the tables change shape in a way older files cannot be brought to.
SCHEMA_VERSION = 1
#: Columns of ``pods`` newer than the files of earlier releases: name -> declaration (with a default).
_ADDED_POD_COLUMNS = {"launch_spec": "TEXT NOT NULL DEFAULT '{}'"}
#: ... and of ``nodes``: why the node is isolated ('' where it is not).
_ADDED_NODE_COLUMNS = {"isolated": "TEXT NOT NULL DEFAULT ''"}


class StateError(Exception):
    """The state file cannot be used (written by an incompatible version, damaged, not ours to read); the
    message says which file, what it means for the jobs, and what to do."""


class DamagedStore(StateError):
    """The state file is not a readable SQLite database: garbage, cut short, a directory in its place."""


class Conflict(Exception):
    """The row changed since it was read (or vanished); re-read and decide again."""


class AlreadyExists(Exception):
    pass


class StateFile:
    """A connection to the state file. Thread-safe: one connection, serialized by a lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        _check_access(path)
        try:
            self._open(path)
        except sqlite3.DatabaseError as error:
            if not is_damage(error):
                raise
            with contextlib.suppress(sqlite3.Error, AttributeError):
                self._db.close()
            raise DamagedStore(damaged_message(path, str(error))) from None

    def _open(self, path: Path) -> None:
        self._db = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        # WAL + NORMAL survives a killed process (what crash safety needs here); not a power cut.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise StateError(
                f"{path} holds state of another trainguard version (schema {version}, this one reads "
                f"{SCHEMA_VERSION}); use another TRAINGUARD_HOME or remove {path.parent}"
            )
        self._db.executescript(_SCHEMA)
        self._add_columns()
        self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _add_columns(self) -> None:
        """Columns added since schema 1 was first written (a file of an earlier release gets them, empty)."""
        for table, added in (("pods", _ADDED_POD_COLUMNS), ("nodes", _ADDED_NODE_COLUMNS)):
            columns = {row["name"] for row in self._db.execute(f"PRAGMA table_info({table})")}
            for name, declaration in added.items():
                if name not in columns:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT: writers queue up instead of failing half-way."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return list(self._db.execute(sql, params))

    def cas(self, sql: str, params: tuple[Any, ...], expected: int) -> int:
        with self.transaction() as db:
            if db.execute(sql, params).rowcount != 1:
                raise Conflict(f"version {expected} is stale")
        return expected + 1


# ---- a damaged state file ----------------------------------------------------------------------------------


def check(path: Path) -> None:
    """Raise ``StateError`` unless ``path`` is a usable state file, or none at all (a new one is made).

    Reads every page (``PRAGMA quick_check``), so it finds damage that opening alone does not (a page
    overwritten in the middle): for the start of a control plane, not for every open. An empty file is a
    usable one: SQLite reads it as a database with nothing in it (as a new state file is for a moment), so
    nothing can have been lost from it.
    """
    if not os.path.lexists(path):
        return
    _check_access(path)
    try:
        db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        try:
            db.execute("SELECT name FROM sqlite_master").fetchall()
            found = [str(row[0]) for row in db.execute("PRAGMA quick_check").fetchall()]
        finally:
            db.close()
    except sqlite3.DatabaseError as error:
        if not is_damage(error):
            raise StateError(f"cannot read the local runtime's state file {path}: {error}") from None
        raise DamagedStore(damaged_message(path, str(error))) from None
    problems = [line for line in found if line != "ok"]
    if problems:
        raise DamagedStore(damaged_message(path, f"{problems[0]}" + (" ..." if len(problems) > 1 else "")))


def is_damage(error: sqlite3.DatabaseError) -> bool:
    """Whether SQLite's error says the file is damaged, not that it is busy for a moment."""
    text = str(error).lower()
    return not ("locked" in text or "busy" in text)


def damaged_message(path: Path, why: str, control_plane: int | None = None) -> str:
    """Which file is damaged, what that means for the jobs, and the command that starts afresh.

    ``control_plane``: the pid of a control plane that has the file open (it has to stop first)."""
    aside = path.parent / f"damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    companions = [Path(f"{path}{suffix}") for suffix in ("-wal", "-shm")]  # SQLite's own, moved with it
    moved = [path, *(file for file in companions if os.path.lexists(file))]
    command = f"mkdir {shlex.quote(str(aside))} && mv {' '.join(shlex.quote(str(f)) for f in moved)} " + (
        shlex.quote(f"{aside}/")
    )
    logs = path.parent / "logs"
    kept = f" The pods' logs are kept in {logs}." if logs.is_dir() else ""
    stop = f"stop the control plane (kill {control_plane}), then " if control_plane else ""
    return (
        f"the local runtime's state file {path} is damaged ({why}): the jobs recorded in it (their specs, "
        "status, restart counts, history and events) cannot be read, and pods it started that still run "
        f"are no longer watched.{kept} To start afresh with no jobs, {stop}move it aside (it is kept there "
        f"for a closer look; the next trainguard command makes a new one):\n    {command}"
    )


def _check_access(path: Path) -> None:
    """A directory where the file should be, or a file this user may not read and write: said plainly."""
    if path.is_dir():
        raise DamagedStore(damaged_message(path, "a directory is where the state file should be"))
    if os.path.lexists(path) and not os.access(path, os.R_OK | os.W_OK):
        raise StateError(
            f"cannot read and write the local runtime's state file {path} (permission denied); its jobs "
            f"are intact. Let its owner read and write it: chmod u+rw {shlex.quote(str(path))} (or run "
            "trainguard as the user who owns it)"
        )
