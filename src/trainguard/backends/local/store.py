"""The local state: ``Store``, one connection to the state file for everything the local runtime keeps: the jobs',
pods' and nodes' rows (read into records, written back with compare-and-swap), the scale requests, the events
and the actions' idempotency keys. The file itself (its tables, transactions, compare-and-swap writes and its
errors) is ``statefile``'s.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainguard.backends.local.records import EventRecord, JobRecord, NodeRecord, PodRecord, PodState
from trainguard.backends.local.statefile import AlreadyExists, Conflict, StateFile

#: Pod states whose pod holds a slot of its node (``PodRecord.holds_slot``), and those of a pod with a
#: process (``PodRecord.alive``).
_HOLDING = tuple(state.value for state in PodState if PodRecord(".", ".", ".", 0, ".", state).holds_slot)
_ALIVE = tuple(state.value for state in PodState if PodRecord(".", ".", ".", 0, ".", state).alive)
_POD_COLUMNS = (
    "name, job, role, idx, node, state, launch, restarts, pid, create_time, exit_code, signal, reason,"
    " started_at, finished_at, deleted_by_us, in_place_acked, stop_deadline, avoid, injected, launch_spec,"
    " version"
)


class Store:
    """A connection to the state file (thread-safe: one connection, serialized by a lock), with every row."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = StateFile(path)

    def close(self) -> None:
        self.file.close()

    # --- jobs -------------------------------------------------------------------------------------------

    def insert_job(self, job: JobRecord) -> JobRecord:
        with self.file.transaction() as db:
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
        rows = self.file.query("SELECT * FROM jobs WHERE name = ?", (name,))
        if not rows or (rows[0]["deleted"] and not include_deleted):
            return None
        return _job(rows[0])

    def list_jobs(self, *, include_deleted: bool = False) -> list[JobRecord]:
        rows = self.file.query("SELECT * FROM jobs ORDER BY created_at, name")
        return [_job(row) for row in rows if include_deleted or not row["deleted"]]

    def job_names(self, *, include_deleted: bool = False) -> list[str]:
        """The jobs' names in ``list_jobs`` order, without reading their specs and statuses."""
        rows = self.file.query("SELECT name, deleted FROM jobs ORDER BY created_at, name")
        return [row["name"] for row in rows if include_deleted or not row["deleted"]]

    def update_spec(self, name: str, spec: dict[str, Any], expected_version: int) -> int:
        return self.file.cas(
            "UPDATE jobs SET spec = ?, spec_version = spec_version + 1 WHERE name = ? AND spec_version = ?"
            " AND deleted = 0",
            (json.dumps(spec), name, expected_version),
            expected_version,
        )

    def update_status(self, name: str, status: dict[str, Any], expected_version: int) -> int:
        return self.file.cas(
            "UPDATE jobs SET status = ?, status_version = status_version + 1"
            " WHERE name = ? AND status_version = ?",
            (json.dumps(status), name, expected_version),
            expected_version,
        )

    def mark_job_deleted(self, name: str) -> None:
        with self.file.transaction() as db:
            db.execute("UPDATE jobs SET deleted = 1 WHERE name = ?", (name,))

    def forget_job(self, name: str) -> None:
        """Remove every row of a deleted job, once its pods are gone."""
        with self.file.transaction() as db:
            self._forget_job(db, name)

    @staticmethod
    def _forget_job(db: sqlite3.Connection, name: str) -> None:
        for table in ("pods", "events", "applied", "scale_requests"):
            db.execute(f"DELETE FROM {table} WHERE job = ?", (name,))
        db.execute("DELETE FROM jobs WHERE name = ?", (name,))

    def used_ports(self) -> set[int]:
        return {row["port"] for row in self.file.query("SELECT port FROM jobs")}

    # --- pods -------------------------------------------------------------------------------------------

    def get_pod(self, name: str) -> PodRecord | None:
        rows = self.file.query("SELECT * FROM pods WHERE name = ?", (name,))
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
        rows = self.file.query(
            f"SELECT * FROM pods WHERE {' AND '.join(where)} ORDER BY job, role, idx", tuple(params)
        )
        return [_pod(row) for row in rows]

    def has_alive_pods(self, job: str) -> bool:
        """Whether a pod of ``job`` has a process (``PodRecord.alive``), without reading the pods."""
        marks = ", ".join("?" * len(_ALIVE))
        return bool(
            self.file.query(
                f"SELECT 1 FROM pods WHERE job = ? AND state IN ({marks}) LIMIT 1", (job, *_ALIVE)
            )
        )

    def slots_in_use(self) -> dict[str, int]:
        """node -> pods that hold one of its slots (``PodRecord.holds_slot``), counted without reading them."""
        rows = self.file.query(
            f"SELECT node, COUNT(*) AS used FROM pods WHERE state IN ({', '.join('?' * len(_HOLDING))})"
            " GROUP BY node",
            _HOLDING,
        )
        return {row["node"]: row["used"] for row in rows}

    def insert_pod(self, pod: PodRecord) -> PodRecord:
        """A new pod slot. Raises ``Conflict`` when one of that name exists: never two of one pod."""
        try:
            with self.file.transaction() as db:
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
        self.file.cas(
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
        self.file.cas("DELETE FROM pods WHERE name = ? AND version = ?", (pod.name, pod.version), pod.version)

    # --- nodes ------------------------------------------------------------------------------------------

    def list_nodes(self) -> list[NodeRecord]:
        rows = self.file.query("SELECT * FROM nodes ORDER BY length(name), name")
        return [
            NodeRecord(row["name"], row["slots"], bool(row["ready"]), row["version"], row["isolated"])
            for row in rows
        ]

    def get_node(self, name: str) -> NodeRecord | None:
        return next((node for node in self.list_nodes() if node.name == name), None)

    def add_node(self, node: NodeRecord) -> None:
        self.add_nodes([node])

    def add_nodes(self, nodes: list[NodeRecord]) -> None:
        """Add nodes (in one transaction); a name that exists already is left as it is."""
        with self.file.transaction() as db:
            db.executemany(
                "INSERT OR IGNORE INTO nodes (name, slots, ready, version, isolated) VALUES (?, ?, ?, 1, ?)",
                [(node.name, node.slots, int(node.ready), node.isolated) for node in nodes],
            )

    def update_node(self, node: NodeRecord) -> NodeRecord:
        self.file.cas(
            "UPDATE nodes SET slots = ?, ready = ?, isolated = ?, version = version + 1"
            " WHERE name = ? AND version = ?",
            (node.slots, int(node.ready), node.isolated, node.name, node.version),
            node.version,
        )
        return replace(node, version=node.version + 1)

    # --- scale requests -----------------------------------------------------------------------------------

    def add_scale_request(self, job: str, request_id: str, role: str, replicas: int, at: float) -> None:
        with self.file.transaction() as db:
            db.execute(
                "INSERT INTO scale_requests VALUES (?, ?, ?, ?, ?)", (request_id, job, role, replicas, at)
            )

    def scale_requests(self, job: str) -> list[tuple[str, str, int, float]]:
        """(id, role, replicas, at), oldest first."""
        rows = self.file.query("SELECT * FROM scale_requests WHERE job = ? ORDER BY rowid", (job,))
        return [(row["id"], row["role"], row["replicas"], row["at"]) for row in rows]

    def drop_scale_requests(self, job: str, keep: set[str]) -> None:
        """Forget requests the controller has handled (all but ``keep``)."""
        with self.file.transaction() as db:
            for request_id, *_ in self.scale_requests(job):
                if request_id not in keep:
                    db.execute("DELETE FROM scale_requests WHERE id = ?", (request_id,))

    # --- events and idempotency keys --------------------------------------------------------------------

    def append_event(self, event: EventRecord) -> None:
        with self.file.transaction() as db:
            db.execute(
                "INSERT INTO events (job, at, type, reason, object, message) VALUES (?, ?, ?, ?, ?, ?)",
                (event.job, event.at, event.type, event.reason, event.object, event.message),
            )

    def append_event_once(self, key: str, event: EventRecord) -> bool:
        """Append ``event`` unless an event with this idempotency key was appended before."""
        with self.file.transaction() as db:
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
        rows = self.file.query(sql + (" LIMIT ?" if limit else ""), (job, limit) if limit else (job,))
        return [
            EventRecord(r["job"], r["at"], r["type"], r["reason"], r["object"], r["message"], r["id"])
            for r in reversed(rows)
        ]

    def claim_key(self, key: str, job: str, at: float) -> bool:
        """Record an action's idempotency key; False when it was applied before (do nothing again)."""
        with self.file.transaction() as db:
            cursor = db.execute("INSERT OR IGNORE INTO applied VALUES (?, ?, ?)", (key, job, at))
            return cursor.rowcount == 1


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


def _loads(text: str) -> Any:
    """A column's JSON; the empty values most pods hold without the decoder (a pass reads every pod's row)."""
    if text == "[]":
        return []
    if text == "{}":
        return {}
    return json.loads(text)


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
        avoid=tuple(_loads(row["avoid"])),
        injected=_loads(row["injected"]),
        launch_spec_json=row["launch_spec"],
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
        pod.launch_spec_json,
    )
