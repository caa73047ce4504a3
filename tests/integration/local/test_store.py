"""The SQLite store: versioned writes from racing processes lose no update; a stale write is refused."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from trainguard.backends.local.records import JobRecord, NodeRecord, PodRecord, PodState
from trainguard.backends.local.statefile import AlreadyExists, Conflict
from trainguard.backends.local.store import Store

pytestmark = pytest.mark.integration

INCREMENTS = 150


def _job(name: str = "race") -> JobRecord:
    return JobRecord(name, "uid", {"spec": {}}, 1, {"count": 0}, 1, 0.0, 40000, workdir="/")


def _increment(path: str, writer: str, times: int, start: Any, results: Any) -> None:
    """Read-modify-write ``status.count`` ``times`` times; on a conflict, read again and decide again."""
    store = Store(Path(path))
    conflicts = 0
    done = 0
    start.wait()
    while done < times:
        record = store.get_job("race")
        assert record is not None
        status = {
            **record.status,
            "count": record.status["count"] + 1,
            writer: record.status.get(writer, 0) + 1,
        }
        time.sleep(0.0005)  # deciding takes a moment: the other writer gets its chance to get in between
        try:
            store.update_status("race", status, record.status_version)
        except Conflict:
            conflicts += 1
            continue
        done += 1
    store.close()
    results.put(conflicts)


def test_two_racing_writers_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store(path).insert_job(_job())
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(2), context.Queue()
    writers = [
        context.Process(target=_increment, args=(str(path), name, INCREMENTS, start, results))
        for name in "ab"
    ]
    for writer in writers:
        writer.start()
    conflicts = [results.get(timeout=60) for _ in writers]
    for writer in writers:
        writer.join(timeout=10)
        assert writer.exitcode == 0
    record = Store(path).get_job("race")
    assert record is not None
    assert record.status == {"count": 2 * INCREMENTS, "a": INCREMENTS, "b": INCREMENTS}
    assert record.status_version == 1 + 2 * INCREMENTS
    assert sum(conflicts) > 0, "the writers never raced; the test proves nothing"


def test_a_write_from_a_stale_read_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.insert_job(_job())
    first = store.get_job("race")
    assert first is not None
    store.update_status("race", {"count": 1}, first.status_version)
    with pytest.raises(Conflict):
        store.update_status("race", {"count": 99}, first.status_version)
    latest = store.get_job("race")
    assert latest is not None
    assert latest.status == {"count": 1}


def test_a_pod_name_exists_once_and_rows_are_compare_and_swap(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    pod = store.insert_pod(PodRecord("job-worker-0", "job", "worker", 0, "node-0", PodState.RUNNING))
    with pytest.raises(Conflict):
        store.insert_pod(PodRecord("job-worker-0", "job", "worker", 0, "node-1", PodState.RUNNING))
    moved = store.update_pod(pod.__class__(**{**pod.__dict__, "node": "node-2"}))
    with pytest.raises(Conflict):
        store.update_pod(pod)  # the version it was read at is gone
    assert store.get_pod("job-worker-0") == moved


def test_jobs_nodes_events_and_keys(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.insert_job(_job("a"))
    with pytest.raises(AlreadyExists):
        store.insert_job(_job("a"))
    store.add_node(NodeRecord("node-0", 2))
    store.add_node(NodeRecord("node-0", 5))  # a node is added once
    assert [(n.name, n.slots) for n in store.list_nodes()] == [("node-0", 2)]
    assert store.claim_key("k1", "a", 0.0) is True
    assert store.claim_key("k1", "a", 1.0) is False
    store.mark_job_deleted("a")
    assert store.get_job("a") is None
    store.insert_job(_job("a"))  # a deleted job's name can be used again; its old keys are gone
    assert store.claim_key("k1", "a", 2.0) is True
