"""The fault tolerance check in the engine (``trainguard.controller.faultcheck``) against the fake cluster:
a failed check isolates its pod's node (the node the cluster bound the pod to) and issues the pod again
elsewhere; an environment pre-check isolates nothing; the bound refuses and fails the job; a fault of the
user's code after a passing post-check is decided by the job's policy, with the check recorded; a pod issued
again that finds no room ends the job after the timeout; each node's latest check is in the status."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.fake_cluster import FakeCluster
from tests.unit.controller.harness import cce_spec, make_job
from trainguard.api import TrainingJob
from trainguard.controller import IsolateNode, JobPhase, JobStatus, LaunchPod, step
from trainguard.controller.backend import EmitEvent, IsolationMode
from trainguard.controller.reports import AgentReport
from trainguard.controller.status import HistoryKind, IsolationOutcome
from trainguard.pod import checks
from trainguard.pod.summary import RankEntry
from trainguard.policy.types import FaultKind, Remedy

JOB = "test-horovod-elastic"
TRAINER = f"{JOB}-trainer-1"


def _rounds(cluster: FakeCluster, job: TrainingJob, status: JobStatus, rounds: int = 3) -> JobStatus:
    for _ in range(rounds):
        cluster.progress()
        status = step(cluster, job, status, cluster.now).status
        cluster.advance(1)
    return status


def _running(nodes: int = 5, **fault_check: Any) -> tuple[TrainingJob, FakeCluster, JobStatus]:
    job = make_job(cce_spec(faultCheck=fault_check) if fault_check else cce_spec())
    cluster = FakeCluster.with_nodes(nodes)
    status = _rounds(cluster, job, JobStatus(), 4)
    assert len(cluster.running()) == 4
    return job, cluster, status


def _entries(status: JobStatus, kind: HistoryKind) -> list[Any]:
    return [entry for entry in status.history if entry.kind is kind]


def test_a_hardware_fault_isolates_the_node_and_issues_the_pod_again_elsewhere() -> None:
    job, cluster, status = _running()
    node = cluster.pods[TRAINER].node
    assert node is not None
    cluster.check_fails(TRAINER, "pre", "gpu.ecc", 3)
    status = _rounds(cluster, job, status)

    (isolate,) = [a for a in cluster.log if isinstance(a, IsolateNode)]
    assert (isolate.node, isolate.pod, isolate.item, isolate.value, isolate.threshold) == (
        node,
        TRAINER,
        "gpu.ecc",
        3,
        0,
    )
    assert cluster.isolated == {node}
    (fault,) = _entries(status, HistoryKind.FAULT)
    assert (fault.fault, fault.rule, fault.action, fault.counted) == (
        FaultKind.HARDWARE_FAULT, "faultCheck", Remedy.RESTART, False,
    )  # fmt: skip
    assert fault.check is not None
    assert (fault.check.phase, fault.check.scenario, fault.check.node) == ("pre", 1, node)
    assert [(f.name, f.value, f.threshold) for f in fault.check.failed] == [("gpu.ecc", 3, 0)]
    (isolated,) = _entries(status, HistoryKind.ISOLATE)
    assert (isolated.node, isolated.pod, isolated.action) == (node, TRAINER, IsolationOutcome.ISOLATED)
    assert any(isinstance(e, EmitEvent) and e.reason == "NodeIsolated" for e in cluster.log)
    # Issued again off the node, not counted: the role's restarts are not spent.
    relaunch = [a for a in cluster.log if isinstance(a, LaunchPod) and a.pod == TRAINER][-1]
    assert relaunch.generation == 2
    assert node in relaunch.avoid_nodes
    assert relaunch.first_in_line  # ahead of the queue where the backend has one
    assert cluster.pods[TRAINER].node not in (None, node)
    assert status.fault_check is not None
    assert (status.fault_check.isolated, status.fault_check.reissues) == ((node,), 1)
    assert status.fault_check.waiting == {}  # running again: no longer waited for
    assert status.phase is JobPhase.RUNNING


def test_an_environment_pre_check_issues_the_pod_again_and_isolates_nothing() -> None:
    job, cluster, status = _running()
    node = cluster.pods[TRAINER].node
    cluster.check_fails(TRAINER, "pre", "host.disk", 0.2)
    status = _rounds(cluster, job, status)
    assert not [a for a in cluster.log if isinstance(a, IsolateNode)]
    (fault,) = _entries(status, HistoryKind.FAULT)
    assert (fault.fault, fault.action, fault.check.scenario) == (
        FaultKind.PRE_CHECK_FAILED,
        Remedy.RESTART,
        2,
    )
    assert not _entries(status, HistoryKind.ISOLATE)
    assert cluster.pods[TRAINER].node != node


def test_past_the_cluster_bound_nothing_is_isolated_and_the_job_fails_saying_why() -> None:
    job, cluster, status = _running(nodes=5)
    cluster.isolated.add("elsewhere")  # 1 of 5 isolated already: 10 % of 5 nodes allows 1
    cluster.check_fails(TRAINER, "periodic", "gpu.lost", 1)
    status = _rounds(cluster, job, status)
    assert not [a for a in cluster.log if isinstance(a, IsolateNode)]
    (refused,) = _entries(status, HistoryKind.ISOLATE)
    assert refused.action is IsolationOutcome.REFUSED
    assert "faultCheck.maxIsolatedShare" in refused.reason
    assert status.phase is JobPhase.FAILED
    assert "would isolate more than 10% of the cluster's 5 nodes" in status.message


def test_a_fault_of_the_users_code_after_a_passing_post_check_is_the_policys() -> None:
    job, cluster, status = _running()
    cluster.check_passes(TRAINER, "post")
    cluster.exit(TRAINER, 1)
    status = _rounds(cluster, job, status)
    (fault,) = _entries(status, HistoryKind.FAULT)
    assert (fault.fault, fault.rule) == (FaultKind.EXITED, "restartPolicy")
    assert fault.check is not None
    assert (fault.check.scenario, fault.check.verdict, fault.check.phase) == (4, "ok", "post")
    assert not [a for a in cluster.log if isinstance(a, IsolateNode)]


def test_a_pod_issued_again_that_finds_no_room_ends_the_job_after_the_timeout() -> None:
    job, cluster, status = _running(nodes=4, reissueTimeoutSeconds=600, maxIsolatedShare=1.0)
    cluster.check_fails(TRAINER, "pre", "gpu.ecc", 1)
    status = _rounds(cluster, job, status)  # the node is isolated: 3 nodes left for 4 pods
    assert TRAINER in (status.fault_check.waiting if status.fault_check else {})
    result = step(cluster, job, status, cluster.now)
    assert result.wake_at is not None
    assert result.wake_at <= status.fault_check.waiting[TRAINER] + 600
    cluster.advance(600)
    status = _rounds(cluster, job, result.status, 2)
    assert status.phase is JobPhase.FAILED
    assert "faultCheck.reissueTimeoutSeconds 600 s" in status.message


def test_each_nodes_latest_check_is_kept_and_a_wanting_environment_is_a_warning() -> None:
    job, cluster, status = _running()
    cluster.check_passes(f"{JOB}-trainer-0", "periodic")
    pod = cluster.pods[TRAINER]
    cluster.check_fails(TRAINER, "periodic", "host.disk", 0.5)
    pod.phase, pod.exit_code, pod.reason = pod.phase.RUNNING, None, None  # environment: the pod runs on
    status = _rounds(cluster, job, status)
    assert status.fault_check is not None
    latest = {entry.node: (entry.pod, entry.phase, entry.verdict) for entry in status.fault_check.nodes}
    assert latest[cluster.pods[TRAINER].node] == (TRAINER, "periodic", "environment")
    assert latest[cluster.pods[f"{JOB}-trainer-0"].node] == (f"{JOB}-trainer-0", "periodic", "ok")
    warnings = [e for e in cluster.log if isinstance(e, EmitEvent) and e.reason == "CheckWarning"]
    assert len(warnings) == 1
    assert "host.disk" in warnings[0].message
    assert not _entries(status, HistoryKind.FAULT)


def _working(cluster: FakeCluster, seconds: dict[str, float], steps: int = 30) -> None:
    """Each pod's agent measured its rank's work per step."""
    for number, (name, busy) in enumerate(seconds.items()):
        pod = cluster.pods[name]
        pod.agent = replace(pod.agent or AgentReport(), ranks=(RankEntry(number, steps, busy),))


def test_a_straggler_is_recorded_once_with_its_figures_and_replaced_only_when_asked() -> None:
    job, cluster, status = _running()
    trainers = [f"{JOB}-trainer-{i}" for i in range(3)]
    _working(cluster, dict(zip(trainers, (0.1, 0.35, 0.1), strict=True)))
    status = _rounds(cluster, job, status)
    (found,) = _entries(status, HistoryKind.STRAGGLER)
    assert (found.pod, found.action) == (TRAINER, Remedy.NONE)
    assert found.straggler is not None
    assert (found.straggler.rank, round(found.straggler.ratio, 2), found.straggler.steps) == (1, 3.5, 30)
    assert len([e for e in cluster.log if isinstance(e, EmitEvent) and e.reason == "Straggler"]) == 1
    assert not _entries(status, HistoryKind.FAULT)  # an event and the page: nothing restarted
    assert cluster.pods[TRAINER].generation == 1


def test_a_straggler_with_action_replace_is_a_fault_of_its_node() -> None:
    job, cluster, status = _running(stragglers={"action": "Replace"}, maxIsolatedShare=1.0)
    node = cluster.pods[TRAINER].node
    trainers = [f"{JOB}-trainer-{i}" for i in range(3)]
    _working(cluster, dict(zip(trainers, (0.1, 0.35, 0.1), strict=True)))
    status = _rounds(cluster, job, status)
    (fault,) = _entries(status, HistoryKind.FAULT)
    assert (fault.fault, fault.rule, fault.counted) == (FaultKind.STRAGGLER, "faultCheck", False)
    assert cluster.isolated == {node}
    assert cluster.pods[TRAINER].generation == 2
    assert cluster.pods[TRAINER].node != node


def test_where_isolation_is_off_the_pod_is_issued_again_and_no_node_is_tainted() -> None:
    job, cluster, status = _running()
    node = cluster.pods[TRAINER].node
    cluster.isolation = IsolationMode.OFF
    cluster.check_fails(TRAINER, "pre", "gpu.ecc", 3)
    status = _rounds(cluster, job, status)
    assert not [a for a in cluster.log if isinstance(a, IsolateNode)]
    assert not _entries(status, HistoryKind.ISOLATE)
    assert status.phase is JobPhase.RUNNING
    assert cluster.pods[TRAINER].node != node
    assert any(
        isinstance(e, EmitEvent) and e.reason == "NodeNotIsolated" and "off" in e.message for e in cluster.log
    )


def test_a_job_past_its_reissues_fails_but_still_isolates_the_faulty_node() -> None:
    job, cluster, status = _running(maxReissues=0)
    node = cluster.pods[TRAINER].node
    cluster.check_fails(TRAINER, "periodic", "gpu.ecc", 1)
    status = _rounds(cluster, job, status)
    assert status.phase is JobPhase.FAILED
    assert "faultCheck.maxReissues 0" in status.message
    assert cluster.isolated == {node}
    (isolated,) = _entries(status, HistoryKind.ISOLATE)
    assert isolated.action is IsolationOutcome.ISOLATED


def _probed(cluster: FakeCluster, mbps: dict[str, float]) -> None:
    """Each pod's pre-check sent ``mbps`` to the next pod of its role."""
    for name, value in mbps.items():
        item = checks.CheckItem("net.bandwidth", checks.OK, value, 25.0, "to the next pod")
        pod = cluster.pods[name]
        pod.agent = replace(
            pod.agent or AgentReport(), last_check=checks.CheckResult("pre", cluster.now, 0.2, (item,))
        )


def test_each_pods_probe_is_kept_and_the_slowest_named_once_with_a_warning() -> None:
    job, cluster, status = _running()
    trainers = [f"{JOB}-trainer-{i}" for i in range(3)]
    _probed(cluster, dict(zip(trainers, (900.0, 870.0, 910.0), strict=True)))
    status = _rounds(cluster, job, status)
    assert status.fault_check is not None
    assert {link.pod: link.mbps for link in status.fault_check.links} == dict(
        zip(trainers, (900.0, 870.0, 910.0), strict=True)
    )
    assert status.fault_check.slow_link is None  # alike: nobody named
    _probed(cluster, {TRAINER: 60.0})
    status = _rounds(cluster, job, status)
    assert status.fault_check is not None
    slow = status.fault_check.slow_link
    assert slow is not None
    assert (slow.pod, slow.node, slow.mbps, slow.median) == (TRAINER, cluster.pods[TRAINER].node, 60.0, 900.0)
    status = _rounds(cluster, job, status)
    warnings = [e for e in cluster.log if isinstance(e, EmitEvent) and e.reason == "SlowLink"]
    assert [w.pod for w in warnings] == [TRAINER]
    assert "60.0 MB/s" in warnings[0].message
    assert "median is 900.0 MB/s" in warnings[0].message


# ---- where only the node checker isolates (``IsolationMode.NODE_CHECKER``) -------------------------------------


def test_where_only_the_node_checker_isolates_a_jobs_hardware_finding_issues_its_pod_again_and_isolates_nothing() -> (
    None
):
    job, cluster, status = _running()
    node = cluster.pods[TRAINER].node
    cluster.isolation = IsolationMode.NODE_CHECKER
    cluster.check_fails(TRAINER, "pre", "gpu.ecc", 3)
    status = _rounds(cluster, job, status)

    assert not [a for a in cluster.log if isinstance(a, IsolateNode)]
    assert cluster.isolated == set()
    assert not _entries(status, HistoryKind.ISOLATE)
    (fault,) = _entries(status, HistoryKind.FAULT)
    assert (fault.fault, fault.rule, fault.action, fault.counted) == (
        FaultKind.HARDWARE_FAULT, "faultCheck", Remedy.RESTART, False,
    )  # fmt: skip
    assert "the node is not isolated: on this cluster only the node checker isolates" in fault.reason
    assert "the node is isolated" not in fault.reason
    # Issued again off the node, first in line, not counted: as a pre-check that found the environment wanting.
    relaunch = [a for a in cluster.log if isinstance(a, LaunchPod) and a.pod == TRAINER][-1]
    assert (relaunch.generation, node in relaunch.avoid_nodes, relaunch.first_in_line) == (2, True, True)
    assert cluster.pods[TRAINER].node not in (None, node)
    assert status.fault_check is not None
    assert (status.fault_check.isolated, status.fault_check.reissues) == ((), 1)
    (said,) = [e for e in cluster.log if isinstance(e, EmitEvent) and e.reason == "NodeNotIsolated"]
    assert f"node {node} not isolated" in said.message
    assert "--isolation-mode node-checker" in said.message
    assert status.phase is JobPhase.RUNNING


def test_where_only_the_node_checker_isolates_a_fault_while_running_keeps_its_scope_and_isolates_nothing() -> (
    None
):
    job, cluster, status = _running()
    node = cluster.pods[TRAINER].node
    cluster.isolation = IsolationMode.NODE_CHECKER
    cluster.check_fails(TRAINER, "periodic", "gpu.lost", 1)
    status = _rounds(cluster, job, status)
    assert not [a for a in cluster.log if isinstance(a, IsolateNode)]
    (fault,) = _entries(status, HistoryKind.FAULT)
    assert fault.check is not None
    assert (fault.check.phase, fault.check.scenario, fault.check.verdict) == ("periodic", 3, "hardware")
    assert "a hardware fault ended the training process: the pod is issued again" in fault.reason
    assert cluster.pods[TRAINER].node != node


def test_where_only_the_node_checker_isolates_no_bound_fails_the_job() -> None:
    """The bounds on isolations are the isolations': where a job's check isolates nothing, none is weighed."""
    job, cluster, status = _running(nodes=5, maxIsolations=0)
    cluster.isolation = IsolationMode.NODE_CHECKER
    cluster.isolated.add("elsewhere")  # 1 of 5: the cluster's bound is reached
    cluster.check_fails(TRAINER, "pre", "gpu.ecc", 1)
    status = _rounds(cluster, job, status)
    assert status.phase is JobPhase.RUNNING
    assert not _entries(status, HistoryKind.ISOLATE)


def test_where_only_the_node_checker_isolates_a_straggler_replaced_isolates_nothing() -> None:
    job, cluster, status = _running(stragglers={"action": "Replace"}, maxIsolatedShare=1.0)
    cluster.isolation = IsolationMode.NODE_CHECKER
    node = cluster.pods[TRAINER].node
    trainers = [f"{JOB}-trainer-{i}" for i in range(3)]
    _working(cluster, dict(zip(trainers, (0.1, 0.35, 0.1), strict=True)))
    status = _rounds(cluster, job, status)
    assert cluster.isolated == set()
    assert cluster.pods[TRAINER].generation == 2
    assert cluster.pods[TRAINER].node != node
