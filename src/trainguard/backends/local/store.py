"""The local state: ``Store``, one connection to the state file for everything the local runtime keeps.

Its parts, by concern: the file, its tables, transactions and compare-and-swap writes (``statefile``); the
jobs', pods' and nodes' rows (``rows``); and here the scale requests, the events and the actions'
idempotency keys. ``Store``, ``Conflict`` and the state file's errors are imported from here.
"""

from __future__ import annotations

from trainguard.backends.local.records import EventRecord
from trainguard.backends.local.rows import Rows
from trainguard.backends.local.statefile import (
    AlreadyExists,
    Conflict,
    DamagedStore,
    StateError,
    check,
    damaged_message,
    is_damage,
)

__all__ = [
    "AlreadyExists",
    "Conflict",
    "DamagedStore",
    "StateError",
    "Store",
    "check",
    "damaged_message",
    "is_damage",
]


class Store(Rows):
    """A connection to the state file (thread-safe: one connection, serialized by a lock), with every row."""

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
