"""Hang restarts in place are not restarts (ModelArts: a restart upon suspension "does not involve resource
scheduling, so Restarts is not affected"): RESTARTS (``PodStatus.restarts``), ``restartCounts`` and
``TRAININGJOB_REPLICA_RESTARTCOUNT`` count relaunches only, and hang restarts are shown on their own
(``PodStatus.hang_restarts``, ``JobStatus.hang_restart_counts``). The policy's counters toward limits and its
consecutive hangs are unchanged (tests/unit/policy/test_hang.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.controller.harness import Harness, worker_job
from trainguard.controller import JobPhase, JobStatus, LaunchPod, PodPhase
from trainguard.policy import PolicyState

W0, W1 = "job-worker-0", "job-worker-1"
ROLES = ("master", "worker")


def _settled(h: Harness) -> bool:
    """The job ended, or runs with every restart of its history recovered from."""
    recovering = [e for e in h.status.history if e.action.startswith("restart") and e.recovered_at is None]
    return h.status.phase.is_terminal or (h.status.phase is JobPhase.RUNNING and not recovering)


def _hang(h: Harness) -> None:
    h.cluster.hang(W0)


def _progress(h: Harness) -> None:
    h.cluster.report_progress(W0)
    h.tick()


def _crash(h: Harness) -> None:
    h.cluster.exit(W0, 137, signal=9)


STEPS: dict[str, Callable[[Harness], None]] = {"hang": _hang, "progress": _progress, "crash": _crash}


@dataclass(frozen=True)
class Case:
    id: str
    #: The job's ``hang`` block, or None: hang handling off.
    hang: dict[str, Any] | None
    steps: tuple[str, ...]
    actions: list[str]
    #: W0's (restarts, hang_restarts, generation) at the end.
    pod: tuple[int, int, int]
    #: The worker role's (restartCounts, hangRestartCounts) at the end.
    role: tuple[int, int]
    #: restart_count (TRAININGJOB_REPLICA_RESTARTCOUNT) of each launch of W0, in order.
    launches: list[int]
    phase: JobPhase = JobPhase.RUNNING


CASES = [
    Case(
        "a hang restarted in place: no restart, one hang restart",
        {"maxConsecutive": 2},
        ("hang",),
        ["restart-in-place"],
        pod=(0, 1, 1),
        role=(0, 1),
        launches=[0],
    ),
    Case(
        "hangs with progress between them: as many hang restarts, still no restart",
        {"maxConsecutive": 2},
        ("hang", "progress", "hang", "progress", "hang"),
        ["restart-in-place"] * 3,
        pod=(0, 3, 1),
        role=(0, 3),
        launches=[0],
    ),
    Case(
        # docs/policy.md §5: the hang after maxConsecutive in a row is a permanent failure of the pod with
        # reason Hang, which the role's failPolicy decides (here the job's failPolicy Any fails the job).
        # Nothing is relaunched, so nothing is a restart.
        "a hang past maxConsecutive fails the pod for good: nothing relaunched, no restart",
        {"maxConsecutive": 2},
        ("hang", "hang", "hang"),
        ["restart-in-place", "restart-in-place", "fail-job"],
        pod=(0, 2, 1),
        role=(0, 2),
        launches=[0],
        phase=JobPhase.FAILED,
    ),
    Case(
        "a crash after a hang restart relaunches the pod: one restart, the hang restart stays",
        {"maxConsecutive": 2},
        ("hang", "crash"),
        ["restart-in-place", "restart"],
        pod=(1, 1, 2),
        role=(1, 1),
        launches=[0, 1],
    ),
    Case(
        # docs/policy.md §5: with hang handling off a hang is an exceptional event, and OnFailure replaces
        # the pod: a normal restart, counted.
        "hang handling off: the hung pod is relaunched, a restart as any other",
        None,
        ("hang",),
        ["restart"],
        pod=(1, 0, 2),
        role=(1, 0),
        launches=[0, 1],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hang_restarts_are_counted_on_their_own(case: Case) -> None:
    h = Harness.start(worker_job(1, job={"hang": case.hang} if case.hang is not None else None))
    h.running()
    for step in case.steps:
        STEPS[step](h)
        h.step()
        h.run_until(_settled)
    assert h.status.phase is case.phase
    assert [e.action for e in h.status.history] == case.actions
    pod = h.pod(W0)
    assert (pod.restarts, pod.hang_restarts, pod.generation) == case.pod
    restarts, hangs = case.role
    assert h.status.restart_counts == {"master": 0, "worker": restarts}
    assert h.status.hang_restart_counts == {"master": 0, "worker": hangs}
    assert [a.restart_count for a in h.cluster.launches() if a.pod == W0] == case.launches
    # The history's counters say the same: podRestarts and roleRestarts are relaunches.
    last = h.status.history[-1].counters
    assert (last["podRestarts"], last["roleRestarts"]) == (pod.restarts, restarts)
    # Hang restarts never spend a budget: the counted restarts are the relaunches that counted.
    assert PolicyState.from_dict(h.status.policy_state).job_restarts == sum(
        e.counted for e in h.status.history
    )


def test_the_counts_are_camel_case_in_json_and_an_older_status_loads_and_counts_on() -> None:
    h = Harness.start(worker_job(1, job={"hang": {"maxConsecutive": 3}}))
    h.running()
    _hang(h)
    h.step()
    h.run_until(_settled)
    stored = h.status.to_dict()
    assert stored["restartCounts"] == {"master": 0, "worker": 0}
    assert stored["hangRestartCounts"] == {"master": 0, "worker": 1}
    assert {p["name"]: (p["restarts"], p["hangRestarts"]) for p in stored["pods"]}[W0] == (0, 1)

    # A status stored before these fields existed: no hangRestartCounts, no pod hangRestarts.
    older = dict(stored)
    del older["hangRestartCounts"]
    older["pods"] = [{k: v for k, v in p.items() if k != "hangRestarts"} for p in stored["pods"]]
    h.status = JobStatus.from_dict(older)
    assert h.status.hang_restart_counts == {}
    assert h.pod(W0).hang_restarts == 0
    h.step()
    assert h.status.hang_restart_counts == {"master": 0, "worker": 0}  # every role listed again
    _progress(h)
    _hang(h)
    h.step()
    h.run_until(_settled)
    assert h.status.hang_restart_counts == {"master": 0, "worker": 1}
    assert (h.pod(W0).restarts, h.pod(W0).hang_restarts) == (0, 1)


# ---- over random fault sequences ----------------------------------------------------------------------

faults = st.one_of(
    st.tuples(st.sampled_from(["hang", "progress", "evict", "force_delete"]), st.sampled_from([W0, W1])),
    st.tuples(st.just("exit"), st.sampled_from([W0, W1]), st.sampled_from([1, 137])),
    st.tuples(st.just("wait"), st.sampled_from([1.0, 5.0])),
)


def _inject(h: Harness, fault: tuple[Any, ...]) -> None:
    kind, *args = fault
    cluster = h.cluster
    if kind == "wait":
        cluster.advance(args[0])
        return
    pod, slot = cluster.pods.get(args[0]), h.pod(args[0])
    if pod is None or slot.phase is not PodPhase.RUNNING or slot.generation != pod.generation:
        return  # faults hit pods the controller saw running (one gone unseen waits for a restartTimeLimit)
    if kind == "exit":
        cluster.exit(args[0], args[1])
    elif kind == "progress":
        cluster.report_progress(args[0])
    else:
        getattr(cluster, kind)(args[0])


def _check(h: Harness) -> None:
    status = h.status
    in_place = Counter(e.pod for e in status.history if e.action == "restart-in-place")
    relaunched = Counter(e.pod for e in status.history if e.action == "restart")
    for role in ROLES:
        pods = [p for p in status.pods if p.role == role]
        # Scope Pod: one restart decision is one relaunch of one pod of the role.
        assert status.restart_counts[role] == sum(p.restarts for p in pods)
        assert status.restart_counts[role] == sum(relaunched[p.name] for p in pods)
        assert status.hang_restart_counts[role] == sum(p.hang_restarts for p in pods)
        assert status.hang_restart_counts[role] == sum(in_place[p.name] for p in pods)
    for pod in status.pods:
        # RESTARTS never includes a hang restart: it is the incarnations started after the first.
        assert pod.restarts == pod.generation - 1
        assert (pod.restarts, pod.hang_restarts) == (relaunched[pod.name], in_place[pod.name])
    for launch in h.cluster.launches():
        assert isinstance(launch, LaunchPod)
        assert launch.restart_count == launch.generation - 1


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hang=st.sampled_from([None, {"maxConsecutive": 1}, {"maxConsecutive": 3}]),
    sequence=st.lists(faults, min_size=1, max_size=12),
)
def test_restart_counts_are_relaunches_and_never_include_hang_restarts(
    hang: dict[str, Any] | None, sequence: list[tuple[Any, ...]]
) -> None:
    h = Harness.start(worker_job(2, job={"hang": hang} if hang is not None else None), nodes=5)
    h.running()
    for fault in sequence:
        _inject(h, fault)
        for _ in range(3):
            h.tick()
            _check(h)
    h.run_until(_settled)
    _check(h)
