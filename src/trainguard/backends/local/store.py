"""The local state: one SQLite file in WAL mode, written with compare-and-swap on version columns.

Every update names the version it read (``WHERE version = ?``). When another writer got there first the
update changes no row and raises ``Conflict``: the caller re-reads and decides again, never overwrites.
Several processes (the control plane, CLI commands, tests) may open the same file at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainguard.backends.local.records import EventRecord, JobRecord, NodeRecord, PodRecord, PodState

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
#: Pod states whose pod holds a slot of its node (``PodRecord.holds_slot``), and those of a pod with a
#: process (``PodRecord.alive``).
_HOLDING = tuple(state.value for state in PodState if PodRecord(".", ".", ".", 0, ".", state).holds_slot)
_ALIVE = tuple(state.value for state in PodState if PodRecord(".", ".", ".", 0, ".", state).alive)
_POD_COLUMNS = (
    "name, job, role, idx, node, state, launch, restarts, pid, create_time, exit_code, signal, reason,"
    " started_at, finished_at, deleted_by_us, in_place_acked, stop_deadline, avoid, injected, launch_spec,"
    " version"
)


class StateError(Exception):
    """The state file cannot be used (written by an incompatible version, damaged, not ours to read); the
    message says which file, what it means for the jobs, and what to do."""


class DamagedStore(StateError):
    """The state file is not a readable SQLite database: garbage, cut short, a directory in its place."""


class Conflict(Exception):
    """The row changed since it was read (or vanished); re-read and decide again."""


class AlreadyExists(Exception):
    pass


class Store:
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
        columns = {row["name"] for row in self._db.execute("PRAGMA table_info(pods)")}
        for name, declaration in _ADDED_POD_COLUMNS.items():
            if name not in columns:
                self._db.execute(f"ALTER TABLE pods ADD COLUMN {name} {declaration}")

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

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return list(self._db.execute(sql, params))

    # --- jobs -------------------------------------------------------------------------------------------

    def insert_job(self, job: JobRecord) -> JobRecord:
        with self.transaction() as db:
            row = db.execute("SELECT deleted FROM jobs WHERE name = ?", (job.name,)).fetchone()
            if row is not None and not row["deleted"]:
                raise AlreadyExists(job.name)
            if row is not None:  # a deleted job of the same name: its leftovers go first
                self._forget_job(db, job.name)
            db.execute(
                "INSERT INTO jobs VALUES (?, ?, ?, 1, ?, 1, ?, ?, ?, ?, 0)",
                (
                    job.name,
                    job.uid,
                    json.dumps(job.spec),
                    json.dumps(job.status),
                    job.created_at,
                    job.port,
                    job.nodes_wanted,
                    job.workdir,
                ),
            )
        return replace(job, spec_version=1, status_version=1)

    def get_job(self, name: str, *, include_deleted: bool = False) -> JobRecord | None:
        rows = self._query("SELECT * FROM jobs WHERE name = ?", (name,))
        if not rows or (rows[0]["deleted"] and not include_deleted):
            return None
        return _job(rows[0])

    def list_jobs(self, *, include_deleted: bool = False) -> list[JobRecord]:
        rows = self._query("SELECT * FROM jobs ORDER BY created_at, name")
        return [_job(row) for row in rows if include_deleted or not row["deleted"]]

    def job_names(self, *, include_deleted: bool = False) -> list[str]:
        """The jobs' names in ``list_jobs`` order, without reading their specs and statuses."""
        rows = self._query("SELECT name, deleted FROM jobs ORDER BY created_at, name")
        return [row["name"] for row in rows if include_deleted or not row["deleted"]]

    def update_spec(self, name: str, spec: dict[str, Any], expected_version: int) -> int:
        return self._cas(
            "UPDATE jobs SET spec = ?, spec_version = spec_version + 1 WHERE name = ? AND spec_version = ?"
            " AND deleted = 0",
            (json.dumps(spec), name, expected_version),
            expected_version,
        )

    def update_status(self, name: str, status: dict[str, Any], expected_version: int) -> int:
        return self._cas(
            "UPDATE jobs SET status = ?, status_version = status_version + 1"
            " WHERE name = ? AND status_version = ?",
            (json.dumps(status), name, expected_version),
            expected_version,
        )

    def mark_job_deleted(self, name: str) -> None:
        with self.transaction() as db:
            db.execute("UPDATE jobs SET deleted = 1 WHERE name = ?", (name,))

    def forget_job(self, name: str) -> None:
        """Remove every row of a deleted job, once its pods are gone."""
        with self.transaction() as db:
            self._forget_job(db, name)

    @staticmethod
    def _forget_job(db: sqlite3.Connection, name: str) -> None:
        for table in ("pods", "events", "applied", "scale_requests"):
            db.execute(f"DELETE FROM {table} WHERE job = ?", (name,))
        db.execute("DELETE FROM jobs WHERE name = ?", (name,))

    def used_ports(self) -> set[int]:
        return {row["port"] for row in self._query("SELECT port FROM jobs")}

    # --- pods -------------------------------------------------------------------------------------------

    def get_pod(self, name: str) -> PodRecord | None:
        rows = self._query("SELECT * FROM pods WHERE name = ?", (name,))
        return _pod(rows[0]) if rows else None

    def list_pods(self, job: str | None = None, *, state: PodState | None = None) -> list[PodRecord]:
        """The pods (of ``job``; in ``state``)."""
        where, params = ["1"], []
        if job is not None:
            where.append("job = ?")
            params.append(job)
        if state is not None:
            where.append("state = ?")
            params.append(state.value)
        rows = self._query(
            f"SELECT * FROM pods WHERE {' AND '.join(where)} ORDER BY job, role, idx", tuple(params)
        )
        return [_pod(row) for row in rows]

    def has_live_pods(self, job: str) -> bool:
        """Whether a pod of ``job`` has a process (``PodRecord.alive``), without reading the pods."""
        marks = ", ".join("?" * len(_ALIVE))
        return bool(
            self._query(f"SELECT 1 FROM pods WHERE job = ? AND state IN ({marks}) LIMIT 1", (job, *_ALIVE))
        )

    def slots_in_use(self) -> dict[str, int]:
        """node -> pods that hold one of its slots (``PodRecord.holds_slot``), counted without reading them."""
        rows = self._query(
            f"SELECT node, COUNT(*) AS used FROM pods WHERE state IN ({', '.join('?' * len(_HOLDING))})"
            " GROUP BY node",
            _HOLDING,
        )
        return {row["node"]: row["used"] for row in rows}

    def insert_pod(self, pod: PodRecord) -> PodRecord:
        """A new pod slot. Raises ``Conflict`` when one of that name exists: never two of one pod."""
        try:
            with self.transaction() as db:
                db.execute(
                    f"INSERT INTO pods ({_POD_COLUMNS}) VALUES"
                    " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                    _pod_values(pod),
                )
        except sqlite3.IntegrityError as error:
            raise Conflict(f"pod {pod.name} exists") from error
        return replace(pod, version=1)

    def update_pod(self, pod: PodRecord) -> PodRecord:
        """Write ``pod`` if its row is still at ``pod.version``; returns the row at its new version."""
        values = _pod_values(pod)
        self._cas(
            "UPDATE pods SET job = ?, role = ?, idx = ?, node = ?, state = ?, launch = ?, restarts = ?,"
            " pid = ?, create_time = ?, exit_code = ?, signal = ?, reason = ?, started_at = ?,"
            " finished_at = ?, deleted_by_us = ?, in_place_acked = ?, stop_deadline = ?, avoid = ?, injected = ?,"
            " launch_spec = ?, version = version + 1"
            " WHERE name = ? AND version = ?",
            (*values[1:], pod.name, pod.version),
            pod.version,
        )
        return replace(pod, version=pod.version + 1)

    def delete_pod(self, pod: PodRecord) -> None:
        self._cas("DELETE FROM pods WHERE name = ? AND version = ?", (pod.name, pod.version), pod.version)

    # --- nodes ------------------------------------------------------------------------------------------

    def list_nodes(self) -> list[NodeRecord]:
        rows = self._query("SELECT * FROM nodes ORDER BY length(name), name")
        return [NodeRecord(row["name"], row["slots"], bool(row["ready"]), row["version"]) for row in rows]

    def get_node(self, name: str) -> NodeRecord | None:
        return next((node for node in self.list_nodes() if node.name == name), None)

    def add_node(self, node: NodeRecord) -> None:
        self.add_nodes([node])

    def add_nodes(self, nodes: list[NodeRecord]) -> None:
        """Add nodes (in one transaction); a name that exists already is left as it is."""
        with self.transaction() as db:
            db.executemany(
                "INSERT OR IGNORE INTO nodes VALUES (?, ?, ?, 1)",
                [(node.name, node.slots, int(node.ready)) for node in nodes],
            )

    def update_node(self, node: NodeRecord) -> NodeRecord:
        self._cas(
            "UPDATE nodes SET slots = ?, ready = ?, version = version + 1 WHERE name = ? AND version = ?",
            (node.slots, int(node.ready), node.name, node.version),
            node.version,
        )
        return replace(node, version=node.version + 1)

    # --- scale requests -----------------------------------------------------------------------------------

    def add_scale_request(self, job: str, request_id: str, role: str, replicas: int, at: float) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO scale_requests VALUES (?, ?, ?, ?, ?)", (request_id, job, role, replicas, at)
            )

    def scale_requests(self, job: str) -> list[tuple[str, str, int, float]]:
        """(id, role, replicas, at), oldest first."""
        rows = self._query("SELECT * FROM scale_requests WHERE job = ? ORDER BY rowid", (job,))
        return [(row["id"], row["role"], row["replicas"], row["at"]) for row in rows]

    def drop_scale_requests(self, job: str, keep: set[str]) -> None:
        """Forget requests the controller has handled (all but ``keep``)."""
        with self.transaction() as db:
            for request_id, *_ in self.scale_requests(job):
                if request_id not in keep:
                    db.execute("DELETE FROM scale_requests WHERE id = ?", (request_id,))

    # --- events and idempotency keys --------------------------------------------------------------------

    def append_event(self, event: EventRecord) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO events (job, at, type, reason, object, message) VALUES (?, ?, ?, ?, ?, ?)",
                (event.job, event.at, event.type, event.reason, event.object, event.message),
            )

    def append_event_once(self, key: str, event: EventRecord) -> bool:
        """Append ``event`` unless an event with this idempotency key was appended before."""
        with self.transaction() as db:
            if (
                db.execute(
                    "INSERT OR IGNORE INTO applied VALUES (?, ?, ?)", (key, event.job, event.at)
                ).rowcount
                != 1
            ):
                return False
            db.execute(
                "INSERT INTO events (job, at, type, reason, object, message) VALUES (?, ?, ?, ?, ?, ?)",
                (event.job, event.at, event.type, event.reason, event.object, event.message),
            )
        return True

    def list_events(self, job: str, limit: int | None = None) -> list[EventRecord]:
        sql = "SELECT * FROM events WHERE job = ? ORDER BY id DESC"
        rows = self._query(sql + (" LIMIT ?" if limit else ""), (job, limit) if limit else (job,))
        return [
            EventRecord(r["job"], r["at"], r["type"], r["reason"], r["object"], r["message"], r["id"])
            for r in reversed(rows)
        ]

    def claim_key(self, key: str, job: str, at: float) -> bool:
        """Record an action's idempotency key; False when it was applied before (do nothing again)."""
        with self.transaction() as db:
            cursor = db.execute("INSERT OR IGNORE INTO applied VALUES (?, ?, ?)", (key, job, at))
            return cursor.rowcount == 1

    # --- helpers ----------------------------------------------------------------------------------------

    def _cas(self, sql: str, params: tuple[Any, ...], expected: int) -> int:
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


def _job(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        name=row["name"],
        uid=row["uid"],
        spec=json.loads(row["spec"]),
        spec_version=row["spec_version"],
        status=json.loads(row["status"]),
        status_version=row["status_version"],
        created_at=row["created_at"],
        port=row["port"],
        nodes_wanted=row["nodes_wanted"],
        workdir=row["workdir"],
        deleted=bool(row["deleted"]),
    )


def _pod(row: sqlite3.Row) -> PodRecord:
    return PodRecord(
        name=row["name"],
        job=row["job"],
        role=row["role"],
        index=row["idx"],
        node=row["node"],
        state=PodState(row["state"]),
        launch=row["launch"],
        restarts=row["restarts"],
        pid=row["pid"],
        create_time=row["create_time"],
        exit_code=row["exit_code"],
        signal=row["signal"],
        reason=row["reason"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        deleted_by_us=bool(row["deleted_by_us"]),
        in_place_acked=row["in_place_acked"],
        stop_deadline=row["stop_deadline"],
        avoid=tuple(json.loads(row["avoid"])),
        injected=json.loads(row["injected"]),
        launch_spec=json.loads(row["launch_spec"]),
        version=row["version"],
    )


def _pod_values(pod: PodRecord) -> tuple[Any, ...]:
    return (
        pod.name,
        pod.job,
        pod.role,
        pod.index,
        pod.node,
        pod.state.value,
        pod.launch,
        pod.restarts,
        pod.pid,
        pod.create_time,
        pod.exit_code,
        pod.signal,
        pod.reason,
        pod.started_at,
        pod.finished_at,
        int(pod.deleted_by_us),
        pod.in_place_acked,
        pod.stop_deadline,
        json.dumps(list(pod.avoid)),
        json.dumps(pod.injected),
        json.dumps(pod.launch_spec),
    )
