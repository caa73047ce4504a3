"""Random fault sequences against CCE's example job on a small fake cluster, checking after every step:

- no role ever has more pods on the cluster than its maxReplicas;
- no counted restart goes past restartLimit (inside its window) or backoffLimit;
- a terminal phase never changes and launches nothing;
- reconciling the same observation again from the new status issues no action and changes nothing;
- the status after JSON serialization behaves exactly like the one in memory (a controller restart);
- no incarnation of a pod is launched twice;
- once the faults stop and the nodes are back, the job settles: Running, or ended.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.controller.harness import Harness, cce_spec, make_job, with_role
from trainguard.controller import JobPhase, JobStatus, LaunchPod, reconcile
from trainguard.policy import PolicyState

JOB = "test-horovod-elastic"
PODS = [f"{JOB}-launcher-0", *(f"{JOB}-trainer-{i}" for i in range(5))]

faults = st.one_of(
    st.tuples(st.just("exit"), st.sampled_from(PODS), st.sampled_from([0, 1, 101, 129, 137, 143])),
    st.tuples(
        st.sampled_from(["node_down", "force_delete", "evict", "hang", "stall"]), st.sampled_from(PODS)
    ),
    st.tuples(st.sampled_from(["node_up", "unstall_all"]), st.integers(0, 5)),
    st.tuples(st.just("scale"), st.integers(0, 7)),
    st.tuples(st.just("wait"), st.sampled_from([0.5, 2.0, 30.0, 61.0])),
)


@st.composite
def jobs(draw: st.DrawFn) -> Any:
    spec = cce_spec(
        backoffLimit=draw(st.sampled_from([None, 3, 6])),
        backoff={"initialSeconds": draw(st.sampled_from([0, 1, 5])), "maxSeconds": 20},
    )
    if draw(st.booleans()):
        spec["hang"] = {"maxConsecutive": 2}
    spec = with_role(spec, "launcher", restartLimit=draw(st.sampled_from([0, 2])))
    spec = with_role(
        spec,
        "trainer",
        restartLimit=draw(st.sampled_from([0, 1, 3])),
        restartTimeout=draw(st.sampled_from([50, 864000])),
        restartScope=draw(st.sampled_from(["Pod", "Replica", "All"])),
        restartPolicy=draw(st.sampled_from(["OnNodeFailWithExitCode", "OnFailure", "Always"])),
    )
    return make_job(spec)


def inject(h: Harness, fault: tuple[Any, ...]) -> None:
    kind, *args = fault
    cluster = h.cluster
    if kind in ("exit", "node_down", "force_delete", "evict", "hang") and args[0] not in cluster.pods:
        return
    if kind == "exit":
        cluster.exit(args[0], args[1])
    elif kind == "node_down":
        node = cluster.pods[args[0]].node
        if node is not None:
            cluster.node_down(node)
    elif kind == "node_up":
        cluster.node_up(f"node-{args[0]}")
    elif kind in ("force_delete", "evict", "hang", "stall"):
        getattr(cluster, kind)(args[0])
    elif kind == "unstall_all":
        cluster.stalled.clear()
    elif kind == "scale":
        cluster.scale("trainer", args[0])
    elif kind == "wait":
        cluster.advance(args[0])


def check_step(h: Harness, previous: JobStatus) -> None:
    observed = h.cluster.observe(h.job)
    now = h.cluster.now
    result = reconcile(h.job, previous, observed, now)
    restored = JobStatus.from_dict(json.loads(json.dumps(previous.to_dict())))
    assert reconcile(h.job, restored, observed, now) == result, "a restored status behaves differently"
    replay = reconcile(h.job, result.status, observed, now)
    assert replay.actions == (), f"replaying the observation issued {replay.actions}"
    assert replay.status == result.status
    if previous.phase.is_terminal:
        assert result.status.phase is previous.phase
        assert not [a for a in result.actions if isinstance(a, LaunchPod)]
    h.cluster.apply(h.job, result.actions)
    h.status = result.status
    check_limits(h, result.status)


def check_limits(h: Harness, status: JobStatus) -> None:
    per_role = Counter(pod.role for pod in h.cluster.pods.values())
    for role, spec in h.job.spec.replica_specs.items():
        assert per_role[role] <= spec.max_count, f"{per_role[role]} pods of {role}"
    state = PolicyState.from_dict(status.policy_state)
    now = h.cluster.now
    for role, spec in h.job.spec.replica_specs.items():
        window = spec.restart_timeout
        inside = [t for t in state.counted_restarts.get(role, ()) if window is None or t > now - window]
        assert spec.restart_limit is None or len(inside) <= spec.restart_limit
    limit = h.job.spec.backoff_limit
    assert limit is None or state.job_restarts <= limit
    launched = Counter((a.pod, a.generation) for a in h.cluster.launches())
    assert not [key for key, n in launched.items() if n > 1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs(), sequence=st.lists(faults, min_size=1, max_size=25))
def test_random_fault_sequences_keep_every_invariant(job: Any, sequence: list[tuple[Any, ...]]) -> None:
    h = Harness.start(job, nodes=7)
    for _ in range(3):
        check_step(h, h.status)
        h.cluster.advance(1)
    for fault in sequence:
        inject(h, fault)
        h.cluster.progress()
        check_step(h, h.status)
        h.cluster.advance(1)
        check_step(h, h.status)
    h.cluster.stalled.clear()
    for node in h.cluster.nodes:
        h.cluster.node_up(node)
    for _ in range(40):
        h.cluster.advance(5)
        check_step(h, h.status)
    assert h.status.phase in (JobPhase.RUNNING, *(p for p in JobPhase if p.is_terminal)), h.status.phase


crashy_faults = st.one_of(
    st.tuples(st.just("exit"), st.sampled_from(PODS), st.sampled_from([1, 101, 129, 137])),
    st.tuples(st.sampled_from(["node_down", "force_delete", "evict", "hang"]), st.sampled_from(PODS)),
    st.tuples(st.just("node_up"), st.integers(0, 5)),
    st.tuples(st.just("scale"), st.integers(1, 5)),
    st.tuples(st.just("wait"), st.sampled_from([0.5, 2.0, 30.0])),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs(), sequence=st.lists(crashy_faults, min_size=1, max_size=15), data=st.data())
def test_a_controller_that_crashes_anywhere_loses_and_duplicates_nothing(
    job: Any, sequence: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    """Each round may stop after any prefix of its actions; the next starts from the last stored status. A
    force-deletion is recorded once per pod it removed (the replacement of a vanished pod may go out before its
    decision is stored), and a deletion of the controller's own is never read as one."""
    h = Harness.start(job, nodes=7)
    force_deleted: Counter[str] = Counter()

    def round_() -> None:
        result = reconcile(h.job, h.status, h.cluster.observe(h.job), h.cluster.now)
        cut = data.draw(st.integers(0, len(result.actions)), label="actions applied before the crash")
        h.cluster.apply(h.job, result.actions[:cut])
        h.status = h.cluster.stored or JobStatus()
        check_limits(h, h.status)
        assert not [e for e in h.cluster.errors if "already exists" in e.message]
        recorded = Counter(e.pod for e in h.status.history if e.fault == "PodForceDeleted")
        assert not recorded - force_deleted, f"recorded {recorded}, force-deleted {force_deleted}"

    for fault in sequence:
        if fault[0] == "force_delete" and fault[1] in h.cluster.pods:
            force_deleted[fault[1]] += 1
        inject(h, fault)
        for _ in range(2):
            h.cluster.progress()
            round_()
            h.cluster.advance(1)
    for node in h.cluster.nodes:
        h.cluster.node_up(node)
    for _ in range(40):
        h.cluster.advance(5)
        h.step()
    assert h.status.phase in (JobPhase.RUNNING, *(p for p in JobPhase if p.is_terminal)), h.status.phase
