"""The local state: one SQLite file in WAL mode, written with compare-and-swap on version columns.

Every update names the version it read (``WHERE version = ?``). When another writer got there first the
update changes no row and raises ``Conflict``: the caller re-reads and decides again, never overwrites.
Several processes (the control plane, CLI commands, tests) may open the same file at once.
"""

from __future__ import annotations

import json
import sqlite3
import threading
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
_POD_COLUMNS = (
    "name, job, role, idx, node, state, launch, restarts, pid, create_time, exit_code, signal, reason,"
    " started_at, finished_at, deleted_by_us, in_place_acked, stop_deadline, avoid, injected, launch_spec,"
    " version"
)


class StateError(Exception):
    """The state file cannot be used (written by an incompatible version)."""


class Conflict(Exception):
    """The row changed since it was read (or vanished); re-read and decide again."""


class AlreadyExists(Exception):
    pass


class Store:
    """A connection to the state file. Thread-safe: one connection, serialized by a lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
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

    def list_pods(self, job: str | None = None) -> list[PodRecord]:
        if job is None:
            rows = self._query("SELECT * FROM pods ORDER BY job, role, idx")
        else:
            rows = self._query("SELECT * FROM pods WHERE job = ? ORDER BY role, idx", (job,))
        return [_pod(row) for row in rows]

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
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO nodes VALUES (?, ?, ?, 1)", (node.name, node.slots, int(node.ready))
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

    def release_key(self, key: str) -> None:
        """Forget a key whose action failed before it took effect, so that it is tried again."""
        with self.transaction() as db:
            db.execute("DELETE FROM applied WHERE key = ?", (key,))

    def has_key(self, key: str) -> bool:
        return bool(self._query("SELECT 1 FROM applied WHERE key = ?", (key,)))

    # --- helpers ----------------------------------------------------------------------------------------

    def _cas(self, sql: str, params: tuple[Any, ...], expected: int) -> int:
        with self.transaction() as db:
            if db.execute(sql, params).rowcount != 1:
                raise Conflict(f"version {expected} is stale")
        return expected + 1


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
