"""How the operator applies one reconcile's actions (no cluster: the API server is a fake that records).

The status writes stay where the controller put them (decisions before the actions, issued keys after);
between them, the pods (and the job's Service) are created side by side, not one round trip after another; a conflict on the
decisions' write stops the batch before anything is created (the one applier's rule)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import yaml

from tests.k8s.operator_harness import ROOT
from trainguard.api.load import load_object
from trainguard.backends.k8s import gang, podgroups
from trainguard.backends.k8s.backend import JobBackend
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import ApiError
from trainguard.backends.k8s.kinds import AITRAININGJOB
from trainguard.backends.k8s.shared import Shared
from trainguard.backends.k8s.verbs import OperatorVerbs
from trainguard.controller import keys, reconcile
from trainguard.controller.backend import LaunchPod, Observed, WriteStatus
from trainguard.controller.status import JobStatus

CCE_JOB = ROOT / "examples" / "jobs" / "cce-horovod-elastic.yaml"
Obj = dict[str, Any]


class FakeKube:
    """Records requests; pod creates (and ``beside``: the creates of those kinds too) wait until ``together``
    of them are in flight at once."""

    def __init__(self, together: int, conflict: bool = False, beside: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(together, timeout=10)
        self.beside = tuple(f"/{kind}" for kind in beside)
        self.conflict = conflict
        self.version = 1

    def _record(self, method: str, path: str) -> None:
        with self.lock:
            self.calls.append((method, path))

    def create(self, path: str, body: Obj) -> Obj:
        if path.endswith(("/pods", *self.beside)):
            self.barrier.wait()  # BrokenBarrierError if the creates come one after another
        self._record("POST", path.rsplit("/", 1)[-1])
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "1", "uid": "u"}}

    def replace(self, path: str, body: Obj) -> Obj:
        self._record("PUT", path.rsplit("/", 1)[-1])
        if self.conflict:
            raise ApiError(409, "the object has been modified")
        with self.lock:
            self.version += 1
            return {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}

    def get(self, path: str) -> Obj:
        raise ApiError(404, "not found")


def _cce_job() -> tuple[Obj, Any]:
    obj = yaml.safe_load(CCE_JOB.read_text())
    obj["metadata"].update(uid="job-uid", resourceVersion="1")
    return obj, load_object(obj, "cce").job


def _backend(kube: FakeKube, obj: Obj) -> JobBackend:
    pods = Cache(kube, "/api/v1/pods", lambda o, n: None)  # type: ignore[arg-type]
    nodes = Cache(kube, "/api/v1/nodes", lambda o, n: None)  # type: ignore[arg-type]
    return JobBackend(Shared(kube, pods, nodes), AITRAININGJOB, obj)  # type: ignore[arg-type]


def _decided_first(job: Any) -> list[Any]:
    """A new job's first batch as a batch whose decisions are written before its pods (a restart's, say): the
    decisions' write, the launches and events, the write of their keys."""
    *between, final = reconcile(job, JobStatus(), Observed(), now=1000.0).actions
    decisions = WriteStatus(keys.status(job, 1), final.status.model_copy(update={"revision": 1}))
    keys_write = WriteStatus(keys.status(job, 2), final.status.model_copy(update={"revision": 2}))
    return [decisions, *between, keys_write]


def test_pods_are_created_side_by_side_between_the_status_writes() -> None:
    obj, job = _cce_job()
    actions = _decided_first(job)
    launches = [a for a in actions if isinstance(a, LaunchPod)]
    assert len(launches) == 4
    assert isinstance(actions[0], WriteStatus)
    assert isinstance(actions[-1], WriteStatus)
    kube = FakeKube(together=len(launches) + 1, beside=("services",))
    backend = _backend(kube, obj)
    backend.apply(job, actions)

    assert kube.calls[0] == ("PUT", "status")
    assert kube.calls[-1] == ("PUT", "status")
    assert [c for c in kube.calls if c[0] == "PUT"] == [("PUT", "status")] * 2
    kinds = [path for _, path in kube.calls[1:-1]]
    # The Service once, side by side with the pods (their names resolve once it is there), not a round trip
    # before them.
    assert kinds.count("pods") == 4
    assert kinds.count("services") == 1
    assert backend.written == actions[-1].status


def test_a_new_jobs_pods_are_created_side_by_side_before_its_one_status_write() -> None:
    obj, job = _cce_job()
    actions = reconcile(job, JobStatus(), Observed(), now=1000.0).actions
    assert [i for i, a in enumerate(actions) if isinstance(a, WriteStatus)] == [len(actions) - 1]
    kube = FakeKube(together=5, beside=("services",))
    backend = _backend(kube, obj)
    backend.apply(job, actions)

    assert [c for c in kube.calls if c[0] == "PUT"] == [("PUT", "status")]
    assert kube.calls[-1] == ("PUT", "status")
    kinds = [path for _, path in kube.calls[:-1]]
    assert kinds.count("pods") == 4
    assert kinds.count("services") == 1
    assert backend.written == actions[-1].status


def test_a_conflict_on_the_decisions_write_creates_nothing() -> None:
    obj, job = _cce_job()
    actions = _decided_first(job)
    kube = FakeKube(together=4, conflict=True)
    backend = _backend(kube, obj)
    assert backend.apply(job, actions).conflict
    assert kube.calls == [("PUT", "status")]
    # Recorded under the write's key, for the next reconcile to see.
    (error,) = backend.observe(job).errors
    assert (error.key, error.transient) == (actions[0].key, False)
    assert error.message.startswith("status conflict")


class PriorityClasses(FakeKube):
    """An API server whose PriorityClasses are ``classes``; Events are accepted and recorded."""

    def __init__(self) -> None:
        super().__init__(1)
        self.classes: set[str] = set()

    def get(self, path: str) -> Obj:
        self._record("GET", path.rsplit("/", 1)[-1])
        if path.rsplit("/", 1)[-1] in self.classes:
            return {"metadata": {"name": path.rsplit("/", 1)[-1]}}
        raise ApiError(404, "not found")


def test_a_priority_class_created_later_is_found_once_the_last_look_is_old(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    obj, job = _cce_job()  # priority: normal
    kube = PriorityClasses()
    backend = _backend(kube, obj)
    now = [100.0]
    monkeypatch.setattr(podgroups.time, "monotonic", lambda: now[0])

    def priority_class() -> str | None:
        return podgroups.priority_class(backend.shared, job, OperatorVerbs(backend, job).emit_event)

    assert priority_class() is None
    assert ("POST", "events") in kube.calls  # PriorityClassNotFound
    kube.classes.add("normal")
    now[0] += gang.PRIORITY_CLASS_TTL - 1
    assert priority_class() is None  # still what was looked up
    assert kube.calls.count(("GET", "normal")) == 1
    now[0] += 2
    assert priority_class() == "normal"
    assert kube.calls.count(("GET", "normal")) == 2
