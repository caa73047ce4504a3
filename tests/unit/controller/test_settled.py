"""Settled slots (controller/faults.py): a slot found to need nothing is skipped while it and its pod are the
same objects on a node still Ready. Skipping must never change what a reconcile does: whatever the table
holds, at any later time, with any policy state, job or node readiness, the result is the one of a
reconcile that skips nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.controller.harness import cce_spec, make_job, with_role
from trainguard.controller import JobPhase, JobStatus, ReconcileResult, SettledSlots, keys, reconcile
from trainguard.controller import faults as faults_module
from trainguard.controller.backend import Observed, ObservedNode, ObservedPhase, ObservedPod, TerminatePod
from trainguard.controller.phases import PodPhase
from trainguard.controller.reports import AgentReport
from trainguard.controller.status import HistoryEntry, PodStatus
from trainguard.policy import PodCounters, PodRef, PolicyState

JOB = "test-horovod-elastic"
SLOTS = [("launcher", 0), ("trainer", 0), ("trainer", 1), ("trainer", 2)]
NODES = ["n0", "n1", "n2"]
times = st.sampled_from([None, 0.0, 5.0, 20.0])


#: The memory of settled slots these tests reconcile with (as a control plane or an operator keeps one).
SETTLED = SettledSlots()


def forget_settled() -> None:
    SETTLED.clear()


@st.composite
def slot_and_pods(draw: st.DrawFn, role: str, index: int) -> tuple[PodStatus, tuple[ObservedPod, ...]]:
    """A slot and its pods: one that looks settled (running, seen, its one pod running), one whose pod is
    starting as the status already knows (where time matters: restartTimeLimit), or anything."""
    name = f"{JOB}-{role}-{index}"
    generation = draw(st.integers(1, 2))
    node = draw(st.sampled_from([*NODES, None]))
    kind = draw(st.sampled_from(["running", "starting", "any"]))
    starting = PodPhase.CREATING if node else PodPhase.PENDING
    phases = {"running": PodPhase.RUNNING, "starting": starting}
    slot = PodStatus(
        name=name,
        role=role,
        index=index,
        phase=phases[kind] if kind in phases else draw(st.sampled_from(PodPhase)),
        node=node,
        generation=generation,
        in_place_restarts=draw(st.integers(0, 1)),
        seen=True if kind != "any" else draw(st.booleans()),
        running_since=5.0 if kind == "running" else draw(times),
        progress_at=draw(times),
        launched_at=draw(times),
        due_at=draw(times),
        open_faults=draw(st.sampled_from([(), (1,)])),
        cause=draw(st.sampled_from(["start", "restart", "grow"])),
    )
    pod_phases = {"running": ObservedPhase.RUNNING, "starting": ObservedPhase.PENDING}

    def pod() -> ObservedPod:
        agent = draw(
            st.one_of(
                st.none(),
                st.builds(AgentReport, st.integers(0, 1), st.booleans(), st.sampled_from([None, 5.0, 20.0])),
            )
        )
        known = kind != "any"
        return ObservedPod(
            name=name,
            role=role,
            index=index,
            generation=generation if known else draw(st.integers(generation - 1, generation + 1)),
            phase=pod_phases[kind] if known else draw(st.sampled_from(ObservedPhase)),
            node=node if known else draw(st.sampled_from([*NODES, None])),
            exit_code=None if known else draw(st.sampled_from([None, 0, 1, 137])),
            reason=None if known else draw(st.sampled_from([None, "Evicted", "OOMKilled"])),
            started_at=draw(times),
            terminating=False if known else draw(st.booleans()),
            agent=agent,
        )

    count = 1 if kind != "any" else draw(st.integers(0, 2))
    return slot, tuple(pod() for _ in range(count))


@st.composite
def policy_states(draw: st.DrawFn) -> dict[str, Any]:
    counters = st.builds(
        PodCounters,
        restarts=st.integers(0, 3),
        consecutive_hangs=st.integers(0, 2),
        backoff_streak=st.integers(0, 2),
        last_restart_at=times,
        running_since=times,
    )
    pods = draw(st.dictionaries(st.sampled_from([PodRef(r, i) for r, i in SLOTS]), counters))
    return PolicyState(pods=pods, job_restarts=draw(st.integers(0, 3))).to_dict()


nodes = st.lists(st.booleans(), min_size=len(NODES), max_size=len(NODES)).map(
    lambda ready: tuple(ObservedNode(name, r) for name, r in zip(NODES, ready, strict=True) if not r)
)
jobs = st.sampled_from(
    [
        make_job(),
        make_job(with_role(cce_spec(hang={"maxConsecutive": 2}), "trainer", restartTimeLimit=1)),
    ]
)


def outcome(job: Any, status: JobStatus, observed: Observed, now: float) -> object:
    """What a reconcile gives, in a comparable form (an exception counts as an outcome too)."""
    try:
        result: ReconcileResult = reconcile(job, status, observed, now, SETTLED)
    except Exception as error:  # comparing two runs, whatever they do
        return ("raised", type(error).__name__, str(error))
    return (json.dumps(result.status.to_dict()), result.actions, result.wake_at)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.tuples(*(slot_and_pods(role, index) for role, index in SLOTS)),
    policy_states(),
    policy_states(),
    nodes,
    nodes,
    jobs,
    jobs,
    st.sampled_from([1.0, 30.0]),
    st.sampled_from([30.0, 100.0, 5000.0]),
    st.sampled_from([JobPhase.RUNNING, JobPhase.RESTARTING, JobPhase.FAILED]),
)
def test_skipping_settled_slots_changes_nothing(
    slots: tuple[tuple[PodStatus, tuple[ObservedPod, ...]], ...],
    first_state: dict[str, Any],
    later_state: dict[str, Any],
    first_nodes: tuple[ObservedNode, ...],
    later_nodes: tuple[ObservedNode, ...],
    first_job: Any,
    later_job: Any,
    first_now: float,
    later_now: float,
    later_phase: JobPhase,
) -> None:
    pods = tuple(pod for _, listed in slots for pod in listed)
    history = (HistoryEntry(seq=1, at=0.0, kind="fault", action="restart", reason="an earlier fault"),)
    status = JobStatus(
        phase=JobPhase.RUNNING,
        started_at=0.0,
        desired={"launcher": 1, "trainer": 3},
        spec_replicas={"launcher": 1, "trainer": 3},
        pods=tuple(slot for slot, _ in slots),
        history=history,
        policy_state=first_state,
    )
    forget_settled()
    outcome(first_job, status, Observed(pods, first_nodes), first_now)  # fills the table
    # Later: the same slot and pod objects, anything else may differ.
    later = status.model_copy(update={"policy_state": later_state, "phase": later_phase})
    observed = Observed(pods, later_nodes)
    remembered = outcome(later_job, later, observed, later_now)
    forget_settled()
    assert remembered == outcome(later_job, later, observed, later_now)


def running_job() -> tuple[Any, JobStatus, Observed]:
    """CCE's example job with its 4 pods running on Ready nodes, after the reconcile that saw them start."""
    job = make_job()
    slots, pods = [], []
    for node, (role, index) in enumerate(SLOTS):
        name = f"{JOB}-{role}-{index}"
        slots.append(
            PodStatus(name=name, role=role, index=index, phase=PodPhase.RUNNING, node=f"n{node}", seen=True)
        )
        pods.append(ObservedPod(name, role, index, 1, ObservedPhase.RUNNING, node=f"n{node}", started_at=1.0))
    status = JobStatus(
        phase=JobPhase.RUNNING,
        started_at=0.0,
        desired={"launcher": 1, "trainer": 3},
        spec_replicas={"launcher": 1, "trainer": 3},
        pods=tuple(slots),
    )
    observed = Observed(tuple(pods), ())
    return job, reconcile(job, status, observed, 2.0).status, observed


def test_a_settled_slot_is_skipped_until_its_node_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The skipping exists (the property above would hold trivially without it) and stops when it must."""
    job, status, observed = running_job()
    examined: list[str] = []
    real = faults_module._observe

    def counting(cycle: Any, slot: PodStatus, *args: Any, **kwargs: Any) -> Any:
        examined.append(slot.name)
        return real(cycle, slot, *args, **kwargs)

    monkeypatch.setattr(faults_module, "_observe", counting)
    first = reconcile(job, status, observed, 3.0, SETTLED)
    examined.clear()
    again = reconcile(job, first.status, observed, 4.0, SETTLED)
    assert examined == []
    assert again.actions == ()

    lost = Observed(observed.pods, (ObservedNode("n2", ready=False),))
    decided = reconcile(job, again.status, lost, 5.0, SETTLED)
    assert examined == [f"{JOB}-trainer-1"]
    assert any(
        isinstance(a, TerminatePod) and a.pod == f"{JOB}-trainer-1" and a.force for a in decided.actions
    )


def test_each_controller_owns_its_policy_codec() -> None:
    """The codec's cache of entries read and written belongs to the controller whose reconciles use it: a
    second controller's starts empty, and a reconcile without one shares nothing with either."""
    job, status, observed = running_job()
    counted = PolicyState(pods={PodRef("trainer", 0): PodCounters(restarts=1)}).to_dict()
    status = status.model_copy(update={"policy_state": counted})
    mine, other = SettledSlots(), SettledSlots()
    key = keys.job_key(job)
    assert mine.codec_of(key) is not other.codec_of(key)
    assert mine.codec_of(key) is mine.codec_of(key)
    first = reconcile(job, status, observed, 3.0, mine)
    assert mine.codec_of(key)._read or mine.codec_of(key)._written
    assert not other.codec_of(key)._read
    assert not other.codec_of(key)._written
    # The same decisions with a codec of its own, another's, or none: the cache only saves work.
    assert reconcile(job, status, observed, 3.0, other).status == first.status
    assert reconcile(job, status, observed, 3.0).status == first.status
