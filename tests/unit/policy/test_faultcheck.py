"""The fault tolerance check's decisions (``trainguard.policy.faultcheck``): ModelArts' four scenarios, the
check's own rule (issued again off the node, not counted, at most maxReissues), the bound on isolations (a
share of the cluster, at least one node; a job's own limit), the 30-minute wait, and when the check is on."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.unit.controller.harness import cce_spec, make_job
from trainguard.api import RestartScope, TrainingJob
from trainguard.api.faultcheck import FaultCheckPolicy
from trainguard.policy.faultcheck import (
    Link,
    Scenario,
    decide_check_fault,
    enabled,
    isolation,
    isolation_bound,
    reissue_expired,
    scenario,
    settings,
    slow_link,
)
from trainguard.policy.types import RULE_FAULT_CHECK, Fault, FaultKind, PodRef, Remedy


@pytest.mark.parametrize(
    ("kind", "phase", "expected"),
    [
        (FaultKind.HARDWARE_FAULT, "pre", Scenario.PRE_CHECK_HARDWARE),
        (FaultKind.PRE_CHECK_FAILED, "pre", Scenario.PRE_CHECK_ENVIRONMENT),
        (FaultKind.HARDWARE_FAULT, "periodic", Scenario.HARDWARE_WHILE_RUNNING),
        (FaultKind.HARDWARE_FAULT, "post", Scenario.HARDWARE_WHILE_RUNNING),
        (FaultKind.EXITED, "post", Scenario.USER_CODE),
        (FaultKind.OOM_KILLED, None, Scenario.USER_CODE),
    ],
)
def test_the_four_scenarios(kind: FaultKind, phase: str | None, expected: Scenario) -> None:
    assert scenario(kind, phase) is expected


def _job(**fault_check: Any) -> TrainingJob:
    return make_job(cce_spec(faultCheck=fault_check) if fault_check else cce_spec())


def _fault(kind: FaultKind = FaultKind.HARDWARE_FAULT) -> Fault:
    return Fault(kind, PodRef("trainer", 1), 100.0, exit_code=120, node="n2")


@pytest.mark.parametrize(
    ("phase", "scope"),
    [
        ("pre", RestartScope.POD),  # the command never ran: the pod alone
        ("periodic", RestartScope.POD),  # CCE's trainer: its nodeNotReady rule's scope, Pod
        ("post", RestartScope.POD),
    ],
)
def test_a_failed_check_issues_the_pod_again_off_its_node_uncounted(phase: str, scope: RestartScope) -> None:
    decision = decide_check_fault(_job(), _fault(), phase, reissues=0)
    assert (decision.action, decision.scope, decision.rule) == (Remedy.RESTART, scope, RULE_FAULT_CHECK)
    assert decision.replace_node
    assert not decision.counted
    assert "issue again 1 of faultCheck.maxReissues 8" in decision.reason


def test_after_a_fault_while_running_the_scope_is_the_one_the_job_gives_a_lost_node() -> None:
    spec = cce_spec()
    spec["replicaSpecs"]["trainer"]["faultTolerantPolicy"][0]["restartScope"] = "All"
    job = make_job(spec)
    assert decide_check_fault(job, _fault(), "periodic", 0).scope is RestartScope.ALL
    assert decide_check_fault(job, _fault(), "pre", 0).scope is RestartScope.POD


def test_past_max_reissues_the_job_fails_with_the_limit() -> None:
    decision = decide_check_fault(_job(maxReissues=2), _fault(FaultKind.PRE_CHECK_FAILED), "pre", reissues=2)
    assert decision.action is Remedy.FAIL_JOB
    assert decision.limit == "faultCheck.maxReissues"
    assert "issued again 2 times" in decision.reason


def test_a_refused_isolation_fails_the_job_with_why() -> None:
    job = _job()
    allowed = isolation(
        ["n2"], cluster_nodes=4, isolated=["n1"], by_job=0, policy=job.spec.fault_check or FaultCheckPolicy()
    )
    assert allowed.isolate == ()
    (refusal,) = allowed.refused
    decision = decide_check_fault(job, _fault(), "pre", 0, refusal)
    assert decision.action is Remedy.FAIL_JOB
    assert decision.limit == "faultCheck.maxIsolatedShare"
    assert "isolating node n2 would isolate more than 10% of the cluster's 4 nodes" in decision.reason


def test_a_fault_that_is_no_check_is_refused() -> None:
    with pytest.raises(ValueError, match="not a fault of a check"):
        decide_check_fault(_job(), _fault(FaultKind.EXITED), "post", 0)


@pytest.mark.parametrize(
    ("nodes", "share", "bound"),
    [(1, 0.1, 1), (9, 0.1, 1), (10, 0.1, 1), (20, 0.1, 2), (1000, 0.1, 100), (16, 0.25, 4)],
)
def test_the_isolation_bound_is_the_share_and_at_least_one(nodes: int, share: float, bound: int) -> None:
    assert isolation_bound(nodes, share) == bound


def test_a_job_isolates_no_more_than_its_own_limit() -> None:
    policy = FaultCheckPolicy(max_isolations=2, max_isolated_share=1.0)
    allowed = isolation(["a", "b", "c"], cluster_nodes=100, isolated=[], by_job=1, policy=policy)
    assert allowed.isolate == ("a",)
    assert [(r.node, r.limit) for r in allowed.refused] == [
        ("b", "faultCheck.maxIsolations"),
        ("c", "faultCheck.maxIsolations"),
    ]


def test_a_node_isolated_already_is_neither_isolated_again_nor_refused() -> None:
    allowed = isolation(["a", "a"], cluster_nodes=10, isolated=["a"], by_job=0, policy=FaultCheckPolicy())
    assert allowed.isolate == ()
    assert allowed.refused == ()


@given(
    wanted=st.lists(st.sampled_from([f"n{i}" for i in range(30)]), max_size=40),
    already=st.sets(st.sampled_from([f"n{i}" for i in range(30)]), max_size=10),
    nodes=st.integers(min_value=1, max_value=60),
    share=st.floats(min_value=0.01, max_value=1.0),
    limit=st.integers(min_value=0, max_value=10),
    by_job=st.integers(min_value=0, max_value=10),
)
def test_isolation_never_passes_either_bound_and_answers_every_node(
    wanted: list[str], already: set[str], nodes: int, share: float, limit: int, by_job: int
) -> None:
    policy = FaultCheckPolicy(max_isolated_share=share, max_isolations=limit)
    allowed = isolation(wanted, cluster_nodes=nodes, isolated=already, by_job=by_job, policy=policy)
    assert len(set(allowed.isolate)) == len(allowed.isolate)
    assert not set(allowed.isolate) & already
    # Never past the cluster's bound (where it was not passed already) nor the job's.
    assert len(already) + len(allowed.isolate) <= max(isolation_bound(nodes, share), len(already))
    assert by_job + len(allowed.isolate) <= max(limit, by_job)
    answered = set(allowed.isolate) | {r.node for r in allowed.refused} | already
    assert set(wanted) <= answered


def test_a_pod_issued_again_waits_for_resources_until_the_timeout_exactly() -> None:
    job = _job(reissueTimeoutSeconds=1800)
    assert reissue_expired(job, 100.0, 1899.0) is None
    reason = reissue_expired(job, 100.0, 1900.0)
    assert reason is not None
    assert "faultCheck.reissueTimeoutSeconds 1800 s" in reason


@pytest.mark.parametrize(
    ("annotation", "field", "restart_policy", "on"),
    [
        (None, None, "OnNodeFailWithExitCode", True),  # the policy restarts: on by default
        (None, None, "Never", False),  # nothing restarts: off by default
        ("false", None, "OnNodeFailWithExitCode", False),  # the annotation turns it off on any dialect
        ("true", None, "Never", True),
        (None, False, "OnNodeFailWithExitCode", False),  # the field
        ("TRUE", False, "Never", True),  # the annotation wins
    ],
)
def test_when_the_check_is_on(
    annotation: str | None, field: bool | None, restart_policy: str, on: bool
) -> None:
    spec = cce_spec(**({"faultCheck": {"enabled": field}} if field is not None else {}))
    for role in spec["replicaSpecs"].values():
        role["restartPolicy"] = restart_policy
        role["faultTolerantPolicy"] = []
    job = make_job(spec)
    if annotation is not None:
        job = job.model_copy(
            update={
                "metadata": job.metadata.model_copy(
                    update={"annotations": {"trainguard.io/fault-check": annotation}}
                )
            }
        )
    assert enabled(job) is on
    assert (settings(job, "trainer", "rdzv:1") is not None) is on


def test_the_agent_settings_follow_the_job() -> None:
    spec = cce_spec(
        faultCheck={"periodSeconds": 60, "thresholds": {"gpu.compute": 0.7}, "disk": {"/data": "2Gi"}}
    )
    container = {"name": "t", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 8}}}
    spec["replicaSpecs"]["trainer"]["template"] = {"spec": {"containers": [container]}}
    found = settings(make_job(spec), "trainer", "host:29400")
    assert found is not None
    assert (found.period, found.threshold("gpu.compute"), found.threshold("gpu.ecc")) == (60, 0.7, 0)
    assert (found.disk, found.gpus, found.rendezvous) == ({"/data": 2 * 2**30}, 8, "host:29400")


@pytest.mark.parametrize(
    ("fault_check", "words"),
    [
        ({"thresholds": {"gpu.bogus": 1}}, "unknown check item 'gpu.bogus'"),
        (
            {"thresholds": {"gpu.compute": 3}},
            "thresholds.gpu.compute: 3.0 is out of range; give a value from 0 to 1",
        ),
        ({"disabledItems": ["nope"]}, "unknown check items ['nope']"),
        ({"disk": {"data": "1Gi"}}, "'data' is not an absolute directory"),
        ({"disk": {"/data": "lots"}}, "'lots' is not a size"),
        ({"maxIsolatedShare": 0}, "greater than 0"),
        ({"timeoutSeconds": 601}, "less than or equal to 600"),
    ],
)
def test_bad_settings_are_refused_with_the_field_and_the_fix(fault_check: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words.replace("[", r"\[").replace("(", r"\(")):
        make_job(cce_spec(faultCheck=fault_check))


@pytest.mark.parametrize(
    ("links", "named"),
    [
        ([], None),
        ([("w-0", "worker", 900.0)], None),  # one probe: nothing to compare with
        ([("w-0", "worker", 900.0), ("w-1", "worker", 880.0), ("w-2", "worker", 910.0)], None),  # alike
        ([("w-0", "worker", 900.0), ("w-1", "worker", 80.0), ("w-2", "worker", 910.0)], ("w-1", 900.0)),
        ([("w-0", "worker", 900.0), ("w-1", "worker", 500.0), ("w-2", "worker", 910.0)], None),  # above half
        # Each role against its own pods: a slow role is not one slow pod.
        (
            [("w-0", "worker", 900.0), ("w-1", "worker", 910.0), ("p-0", "ps", 90.0), ("p-1", "ps", 95.0)],
            None,
        ),
        (
            [("w-0", "worker", 900.0), ("w-1", "worker", 100.0), ("p-0", "ps", 90.0), ("p-1", "ps", 5.0)],
            ("p-1", 47.5),  # the further below its role's median of the two
        ),
    ],
)
def test_the_slowest_link_is_named_only_well_below_its_roles_median(
    links: list[tuple[str, str, float]], named: tuple[str, float] | None
) -> None:
    found = slow_link(Link(*link) for link in links)
    assert (None if found is None else (found[0].pod, found[1])) == named


@given(st.lists(st.floats(min_value=0.0, max_value=1e5, allow_nan=False), min_size=2, max_size=40))
def test_a_named_link_is_its_roles_slowest_and_under_half_its_median(values: list[float]) -> None:
    links = [Link(f"w-{i}", "worker", value) for i, value in enumerate(values)]
    found = slow_link(links)
    if found is None:
        ordered = sorted(values)
        median = (ordered[(len(values) - 1) // 2] + ordered[len(values) // 2]) / 2
        assert min(values) >= 0.5 * median
    else:
        link, median = found
        assert link.mbps == min(values)
        assert link.mbps < 0.5 * median
