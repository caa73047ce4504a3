"""The rendezvous store's writes go out without the reconcile waiting for them (no cluster: the API server is a
fake that records, and holds the store's Service until the test lets it go).

A reconcile looks at the store in the cache and hands the writes to the pool; while they are in flight, a
look asked for again is taken once they are done, with ``launching`` kept, and never as a second create."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from tests.k8s.operator_harness import ROOT
from trainguard.api.load import load_object
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import ApiError
from trainguard.backends.k8s.kinds import PYTORCHJOB
from trainguard.backends.k8s.shared import Shared
from trainguard.backends.k8s.store_pod import StorePod

Obj = dict[str, Any]
ELASTIC_JOB = ROOT / "examples" / "jobs" / "pytorchjob-elastic.yaml"
#: Generous for a busy machine: each wait is for a few in-process calls.
DEADLINE_S = 10.0


class HeldKube:
    """Records writes; a Service create waits until ``release`` is set."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.release = threading.Event()

    def create(self, path: str, body: Obj) -> Obj:
        kind = path.rsplit("/", 1)[-1]
        with self.lock:
            self.calls.append(("POST", kind))
        if kind == "services":
            assert self.release.wait(DEADLINE_S), "the test never let the Service go"
        meta = {**body["metadata"], "uid": f"{kind}-uid", "resourceVersion": "1"}
        return {**body, "metadata": meta, "status": {"phase": "Pending"}}

    def delete(self, path: str, grace: int | None = None, uid: str | None = None) -> None:
        with self.lock:
            self.calls.append(("DELETE", path.rsplit("/", 1)[-1]))

    def get(self, path: str) -> Obj:
        raise ApiError(404, "not found")

    def writes(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.calls)


def _wait(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {DEADLINE_S} s: {what}")
        time.sleep(0.01)


def _store() -> tuple[HeldKube, Shared, StorePod, Any]:
    obj = yaml.safe_load(ELASTIC_JOB.read_text())
    obj["metadata"].update(namespace="default", uid="job-uid", resourceVersion="1")
    job = load_object(obj, "elastic").job
    kube = HeldKube()
    pods = Cache(kube, "/api/v1/pods", lambda o, n: None)  # type: ignore[arg-type]
    nodes = Cache(kube, "/api/v1/nodes", lambda o, n: None)  # type: ignore[arg-type]
    shared = Shared(kube, pods, nodes)  # type: ignore[arg-type]
    return kube, shared, StorePod(shared, PYTORCHJOB, "default", job.name), job


def test_a_reconcile_does_not_wait_for_the_stores_writes() -> None:
    kube, shared, store, job = _store()
    try:
        store.tend(job, launching=True)  # returns while the Service is held
        _wait("the store's Service asked for", lambda: kube.writes() == [("POST", "services")])
        # Looks asked for meanwhile (a next reconcile's launches, its batch's end) wait for the writes in
        # flight: no second Service, no pod before the Service.
        store.tend(job, launching=True)
        store.tend(job)
        assert kube.writes() == [("POST", "services")]
        kube.release.set()
        _wait("the writes done", lambda: not shared.store_requests)
        # No replica pod is in the cache (the fake creates none), yet the store stays: the look taken again
        # kept ``launching`` from one of the looks it was asked with (without it, the store would go).
        assert kube.writes() == [("POST", "services"), ("POST", "pods")]
        # A look once nothing is in flight: no replica runs, no launch, so the store goes.
        store.tend(job)
        _wait("the store removed", lambda: ("DELETE", f"{job.name}-rendezvous") in kube.writes())
        _wait("the writes done", lambda: not shared.store_requests)
        assert len(kube.writes()) == 3
    finally:
        kube.release.set()
        shared.pool.shutdown(wait=True)


def test_a_failed_write_is_logged_and_the_next_look_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    kube, shared, store, job = _store()

    def refuse(path: str, body: Obj) -> Obj:
        raise ApiError(403, "services is forbidden")

    kube.create = refuse  # type: ignore[method-assign]
    try:
        store.tend(job, launching=True)
        _wait("the writes done", lambda: not shared.store_requests)
        assert "services is forbidden" in caplog.text
        store.tend(job, launching=True)  # not stuck in flight: asked again, tried again
        _wait("the second try logged", lambda: caplog.text.count("services is forbidden") == 2)
    finally:
        shared.pool.shutdown(wait=True)
