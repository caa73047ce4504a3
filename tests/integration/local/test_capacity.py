"""How big a job the local runtime runs, placement from free-slot counts, and the control plane's loop with a
job too large for this machine: held (never reconciled), started once it fits, never grown past the limit.

The loop is driven directly (``ControlPlane.step``) on a store in a temporary home, without a daemon; the
nodes have no free slot (no process starts) until a held job fits and gets nodes of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.api import TrainingJob
from trainguard.api.model import MAX_REPLICAS
from trainguard.backends.local import capacity
from trainguard.backends.local.clock import Clock
from trainguard.backends.local.home import Home
from trainguard.backends.local.placement import choose_node, free_of, free_slots, pick, room
from trainguard.backends.local.plane import ControlPlane
from trainguard.backends.local.records import JobRecord, NodeRecord, PodRecord, PodState
from trainguard.backends.local.service import RequestError, Service
from trainguard.backends.local.store import Store
from trainguard.controller.admission import MACHINE, PodLimit, count, is_held, oversize
from trainguard.controller.status import JobStatus

from .jobs import SLEEPING, simple_job

LIMIT = 8


def _job(name: str = "j", **roles: int) -> TrainingJob:
    specs = {role: {"replicas": count} for role, count in (roles or {"worker": 1}).items()}
    return TrainingJob.model_validate({"metadata": {"name": name}, "spec": {"replicaSpecs": specs}})


def _held(record: JobRecord) -> bool:
    """Whether the stored status is a held job's, as the engine reads it."""
    return is_held(JobStatus.from_dict(record.status), MACHINE)


# ---- pure parts --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "limit"),
    [
        ({}, capacity.DEFAULT_MAX_PODS),
        ({capacity.ENV_MAX_PODS: "12"}, 12),
        ({capacity.ENV_MAX_PODS: " 3 "}, 3),
        ({capacity.ENV_MAX_PODS: "0"}, capacity.DEFAULT_MAX_PODS),
        ({capacity.ENV_MAX_PODS: "-4"}, capacity.DEFAULT_MAX_PODS),
        ({capacity.ENV_MAX_PODS: "many"}, capacity.DEFAULT_MAX_PODS),
        ({capacity.ENV_MAX_PODS: "4096"}, 4096),
        ({capacity.ENV_MAX_PODS: "100000"}, capacity.CEILING_MAX_PODS),
    ],
)
def test_the_limit_comes_from_the_environment(environ: dict[str, str], limit: int) -> None:
    assert capacity.max_pods(environ) == limit


@pytest.mark.parametrize(
    ("roles", "replicas", "size"),
    [
        ({"worker": 3}, None, 3),
        ({"launcher": 1, "worker": 4}, None, 5),
        ({"launcher": 1, "worker": 4}, {"worker": 9}, 10),
        ({"worker": MAX_REPLICAS, "ps": MAX_REPLICAS}, None, 2 * MAX_REPLICAS),
    ],
)
def test_size_counts_every_role(roles: dict[str, int], replicas: dict[str, int] | None, size: int) -> None:
    assert count(_job(**roles), MACHINE, replicas) == size


@given(counts=st.lists(st.integers(0, MAX_REPLICAS), min_size=1, max_size=4), limit=st.integers(1, 10**6))
def test_a_job_fits_exactly_when_its_pods_are_within_the_limit(counts: list[int], limit: int) -> None:
    job = _job(**{f"r{i}": pods for i, pods in enumerate(counts)})
    over = oversize(job, PodLimit(limit, MACHINE))
    why = None if over is None else capacity.explain(over)
    assert (why is None) == (sum(counts) <= limit)
    if why is not None:
        assert f"{sum(counts):,} pods" in why
        assert f"at most {limit:,} pods" in why
        assert capacity.ENV_MAX_PODS in why
        assert "trainguard scale j --role ROLE --replicas N" in why


def test_started_held_and_desired_read_the_stored_status() -> None:
    job = _job(worker=5)
    fresh = JobRecord("j", "u", job.to_dict(), 1, {}, 1, 0.0, 1)
    waits = {"phase": "Pending", "reason": "Unschedulable", "message": "job j waits: why"}
    held = JobRecord("j", "u", job.to_dict(), 1, waits, 2, 0.0, 1)
    running = JobRecord("j", "u", job.to_dict(), 1, {"startedAt": 5.0, "desired": {"worker": 2}}, 3, 0.0, 1)
    assert [capacity.started(r) for r in (fresh, held, running)] == [False, False, True]
    assert [_held(r) for r in (fresh, held, running)] == [False, True, False]
    assert capacity.desired(fresh, job) == {"worker": 5}
    assert capacity.desired(running, job) == {"worker": 2}


_nodes = st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=0, max_size=6).map(
    lambda specs: [NodeRecord(f"node-{i}", slots, ready) for i, (slots, ready) in enumerate(specs)]
)
_states = st.sampled_from(list(PodState))


@given(
    nodes=_nodes,
    placed=st.lists(st.tuples(st.integers(0, 5), _states), max_size=12),
    avoid=st.sets(st.integers(0, 5)),
)
def test_placing_from_counts_is_placing_from_pods(
    nodes: list[NodeRecord], placed: list[tuple[int, PodState]], avoid: set[int]
) -> None:
    pods = [PodRecord(f"p{i}", "j", "w", i, f"node-{n}", state) for i, (n, state) in enumerate(placed)]
    used: dict[str, int] = {}
    for pod in pods:
        if pod.holds_slot:
            used[pod.node] = used.get(pod.node, 0) + 1
    avoided = [f"node-{i}" for i in avoid]
    free = free_of(nodes, used)
    assert free == free_slots(nodes, pods)
    assert pick(nodes, free, avoided) == choose_node(nodes, pods, avoided)
    assert room(nodes, free) == sum(max(free[n.name], 0) for n in nodes if n.ready)
    assert (pick(nodes, free) is None) == (room(nodes, free) == 0)


# ---- the store's counting queries ------------------------------------------------------------------------


def test_the_store_counts_slots_and_alive_pods_without_reading_pods(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.add_nodes([NodeRecord("node-0", 2), NodeRecord("node-1", 1)])
    store.add_nodes([NodeRecord("node-0", 9)])  # an existing name is left as it is
    assert [(n.name, n.slots) for n in store.list_nodes()] == [("node-0", 2), ("node-1", 1)]
    for name, job, node, state in [
        ("a-w-0", "a", "node-0", PodState.RUNNING),
        ("a-w-1", "a", "node-0", PodState.TERMINATING),
        ("a-w-2", "a", "", PodState.PENDING),
        ("b-w-0", "b", "node-1", PodState.LAUNCHING),
        ("b-w-1", "b", "node-1", PodState.EXITED),
        ("c-w-0", "c", "node-1", PodState.DELETED),
    ]:
        store.insert_pod(PodRecord(name, job, "w", int(name[-1]), node, state))
    assert store.slots_in_use() == {"node-0": 2, "node-1": 1}
    assert [store.has_alive_pods(job) for job in "abcd"] == [True, True, False, False]
    assert [p.name for p in store.list_pods("a", state=PodState.PENDING)] == ["a-w-2"]
    assert [p.name for p in store.list_pods(state=PodState.EXITED)] == ["b-w-1"]
    assert [p.name for p in store.list_pods("a")] == ["a-w-0", "a-w-1", "a-w-2"]
    for name in ("x", "y"):
        store.insert_job(JobRecord(name, "u", {}, 1, {}, 1, float(ord(name)), 1, workdir="/"))
    store.mark_job_deleted("x")
    assert store.job_names() == ["y"]
    assert store.job_names(include_deleted=True) == ["x", "y"]


# ---- the loop with a job too large -----------------------------------------------------------------------


class _Plane:
    """A control plane on a store in ``tmp_path``, without a daemon, and with no free slot on any node."""

    def __init__(self, tmp_path: Path, limit: int = LIMIT) -> None:
        self.home = Home(tmp_path / "home").ensure()
        self.store = Store(self.home.state_db)
        self.plane = ControlPlane(self.home, self.store, Clock(), {"PATH": "/usr/bin:/bin"}, max_pods=limit)
        self.service = Service(self.plane, lambda stop_pods: None)
        self.workdir = str(tmp_path)

    def submit(self, name: str, replicas: int, **role: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.service.op_submit(
            simple_job(name, SLEEPING, replicas, **role), self.workdir
        )
        self.no_room()
        return result

    def no_room(self) -> None:
        for node in self.store.list_nodes():
            self.store.update_node(NodeRecord(node.name, 0, node.ready, node.version))

    def record(self, name: str) -> JobRecord:
        record = self.store.get_job(name)
        assert record is not None
        return record


@pytest.fixture
def planes(tmp_path: Path) -> Iterator[Callable[..., _Plane]]:
    made: list[_Plane] = []

    def make(limit: int = LIMIT) -> _Plane:
        made.append(_Plane(tmp_path / str(len(made)), limit))
        return made[-1]

    yield make
    for local in made:
        local.plane.stop_all_pods()
        local.store.close()


def test_a_job_too_large_is_held_said_once_and_costs_nothing(planes: Callable[..., _Plane]) -> None:
    local = planes()
    result = local.submit("big", MAX_REPLICAS, maxReplicas=MAX_REPLICAS, minReplicas=1)
    assert "job big waits: it has 100,000 pods" in result["held"]
    assert local.store.list_nodes() == []  # no nodes for a job that cannot run
    for _ in range(3):
        started = time.monotonic()
        assert local.plane.step()  # held: the control plane stays up for it
        assert time.monotonic() - started < 1.0
    record = local.record("big")
    assert record.status == {"phase": "Pending", "reason": "Unschedulable", "message": result["held"]}
    assert local.store.list_pods("big") == []
    events = local.store.list_events("big")
    assert [(e.type, e.reason) for e in events] == [("Warning", "FailedScheduling")]


def test_a_held_job_scaled_to_fit_starts_and_a_started_one_never_grows_past_the_limit(
    planes: Callable[..., _Plane],
) -> None:
    local = planes()
    local.submit("big", 50, maxReplicas=100, minReplicas=1)
    local.plane.step()
    assert _held(local.record("big"))
    answer = local.service.op_scale("big", "worker", 3)  # not started: its spec's replicas change
    assert answer["replicas"] == 3
    assert local.record("big").spec["spec"]["replicaSpecs"]["worker"]["replicas"] == 3
    local.plane.step()
    record = local.record("big")
    assert capacity.started(record)
    assert record.status["reason"] == ""
    assert len(local.store.list_nodes()) == LIMIT + 1  # its nodes, made when it fit (largest: the limit)
    assert sorted(pod["name"] for pod in record.status["pods"]) == [f"big-worker-{i}" for i in range(3)]
    before = (record.spec, len(local.store.scale_requests("big")))
    with pytest.raises(
        RequestError, match=r"would have 9 pods; the local runtime runs at most 8 pods of a job"
    ):
        local.service.op_scale("big", "worker", 9)
    with pytest.raises(RequestError, match=r"would have 40 pods"):
        local.service.op_apply(simple_job("big", SLEEPING, 40, maxReplicas=100, minReplicas=1), local.workdir)
    record = local.record("big")
    assert (record.spec, len(local.store.scale_requests("big"))) == before  # unchanged
    assert local.service.op_scale("big", "worker", LIMIT)["request"]  # up to the limit is fine


def test_too_many_nodes_are_refused(planes: Callable[..., _Plane]) -> None:
    local = planes()
    with pytest.raises(RequestError, match=r"--nodes 100000000: at most 8 nodes"):
        local.service.op_submit(simple_job("a", SLEEPING, 2), local.workdir, nodes=100_000_000)
    assert local.store.list_jobs() == []


def test_a_request_waits_for_one_job_not_a_whole_pass(planes: Callable[..., _Plane]) -> None:
    """The loop takes its lock job by job, and a waiting request goes first: a request sent while one job is
    reconciled is answered before the next job's reconcile begins."""
    local = planes(limit=10_000)
    for name in ("a", "b", "c"):
        local.submit(name, 400)
    slow = threading.Event()
    order: list[str] = []
    step_job = local.plane._step_job

    def traced(record: JobRecord) -> bool:
        order.append(record.name)
        if record.name == "a":  # the request comes while job a is reconciled, and has to wait for it
            slow.set()
            deadline = time.monotonic() + 10
            while local.plane.lock.waiting == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
        return step_job(record)

    local.plane._step_job = traced  # type: ignore[method-assign]
    answered: list[float] = []

    def request() -> None:
        slow.wait(10)
        started = time.monotonic()
        local.service.op_scale("c", "worker", 400)
        answered.append(time.monotonic() - started)
        order.append("request")

    thread = threading.Thread(target=request)
    thread.start()
    local.plane.step()
    thread.join(10)
    assert order.index("request") < order.index("c"), order
    assert answered
    assert answered[0] < 3.0
