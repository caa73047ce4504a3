"""Bad nodes and the fault tolerance check in the simulator: found by the simulated agent's checks, isolated by
the real controller within the job's bounds, and the goodput this buys against the same run without the check."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainguard.api import TrainingJob
from trainguard.backends.sim import SimConfig, simulate
from trainguard.backends.sim.badnodes import BadNodeSettings
from trainguard.backends.sim.cluster import SimCluster
from trainguard.backends.sim.compare import compare_isolation
from trainguard.backends.sim.jobs import ISOLATION_LIMITS, default_job, with_fault_check
from trainguard.backends.sim.pods import SimPod
from trainguard.cli.main import main
from trainguard.controller import JobPhase
from trainguard.pod.checks import EXIT_CHECK_FAILED
from trainguard.policy.faultcheck import isolation_bound
from trainguard.policy.types import FaultKind


def small(seed: int, **bad: Any) -> SimConfig:
    """20 worker nodes and 4 spares, no other failures, 2 of the 24 bad (failing every 2 h), half of them
    found by a pre-check, 2 days."""
    settings_ = {"share": 0.08, "mtbf_hours": 2.0, "precheck_finds": 0.5, **bad}
    return SimConfig(
        gpus=160,
        days=2.0,
        seed=seed,
        spare_nodes=4,
        mtbf_hours=1e6,
        launch_rate=None,
        bad_nodes=BadNodeSettings(**settings_),
    )


@pytest.fixture
def placements(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Every placement of a pod: its node, and whether that node was isolated when the pod was placed."""
    seen: list[tuple[str, bool]] = []
    bind = SimCluster._bind

    def recorded(self: SimCluster, pod: SimPod) -> bool:
        placed = bind(self, pod)
        if placed and pod.node is not None:
            seen.append((pod.node, pod.node in self.isolated))
        return placed

    monkeypatch.setattr(SimCluster, "_bind", recorded)
    return seen


@pytest.mark.parametrize(("seed", "while_running"), [(0, "periodic"), (4, "post")])
def test_with_the_check_the_bad_nodes_end_isolated_their_faults_stop_and_goodput_is_higher(
    seed: int, while_running: str, placements: list[tuple[str, bool]]
) -> None:
    on, off = (row.result for row in compare_isolation(None, small(seed)))
    assert on.bad_nodes == off.bad_nodes
    assert len(on.bad_nodes) == 2
    # On: each bad node found once (before its pod's command, or while it ran) and isolated; nothing after.
    assert on.isolated == on.bad_nodes
    assert dict(on.bad_faults) == {"pre": 1, while_running: 1}
    assert on.reissues == 2
    isolated_at = {entry.node: entry.at for entry in on.history if entry.kind == "isolate"}
    assert set(isolated_at) == set(on.bad_nodes)
    bad = [fault for fault in on.faults if fault.node in on.bad_nodes]
    assert len(bad) == 2
    assert all(fault.at <= isolated_at[fault.node] for fault in bad)
    checked = [entry for entry in on.history if entry.kind == "fault"]
    assert all(entry.fault is FaultKind.HARDWARE_FAULT for entry in checked)
    assert all(entry.exit_code == EXIT_CHECK_FAILED for entry in checked)
    assert min(entry.at for entry in checked) < 30  # the pre-check fails within seconds of the start
    # Off: the same bad nodes fail the job again and again, as plain exits and hangs.
    assert off.isolated == ()
    assert off.reissues == 0
    assert off.bad_faults["plain"] > 2
    assert all(entry.fault is not FaultKind.HARDWARE_FAULT for entry in off.history if entry.kind == "fault")
    assert on.phase is off.phase is JobPhase.RUNNING
    assert on.goodput > off.goodput
    # No pod was placed on a node after its isolation.
    assert placements
    assert not any(was_isolated for _, was_isolated in placements)


def test_a_run_with_bad_nodes_is_decided_by_its_seed() -> None:
    first, again = simulate(None, small(3)), simulate(None, small(3))
    assert (first.bad_nodes, first.faults, first.history) == (again.bad_nodes, again.faults, again.history)
    assert first.goodput == again.goodput
    assert simulate(None, small(5)).bad_nodes != first.bad_nodes


def test_no_bad_nodes_leaves_the_run_as_it_was() -> None:
    plain = SimConfig(gpus=64, mtbf_hours=200.0, days=3.0, seed=2)
    with_none = SimConfig(gpus=64, mtbf_hours=200.0, days=3.0, seed=2, bad_nodes=BadNodeSettings(0.0))
    assert simulate(None, plain).history == simulate(None, with_none).history
    assert simulate(None, plain).bad_nodes == ()


def test_past_the_bound_a_node_is_not_isolated_and_the_job_fails_naming_the_field() -> None:
    """4 bad nodes of 24, all found by the pre-check; maxIsolatedShare 10 % allows 2."""
    config = small(0, share=0.15, precheck_finds=1.0)
    result = compare_isolation(None, config)[0].result
    assert len(result.bad_nodes) == 4
    assert len(result.isolated) == isolation_bound(24, 0.1) == 2
    assert result.phase is JobPhase.FAILED
    assert any("faultCheck.maxIsolatedShare" in entry.reason for entry in result.history)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    share=st.sampled_from([0.05, 0.1, 0.2, 0.4]),
    bound_share=st.sampled_from([0.01, 0.05, 0.1, 0.3]),
    finds=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_isolation_never_passes_the_bound_nor_places_a_pod_on_an_isolated_node(
    seed: int, share: float, bound_share: float, finds: float, placements: list[tuple[str, bool]]
) -> None:
    placements.clear()
    config = small(seed, share=share, precheck_finds=finds)
    limits = {**ISOLATION_LIMITS, "maxIsolatedShare": bound_share}
    job = with_fault_check(TrainingJob.model_validate(default_job(config.nodes)), True, limits)
    result = simulate(job, config)
    bound = isolation_bound(config.nodes + config.spares, bound_share)
    assert bound >= 1
    assert len(result.isolated) <= bound
    assert set(result.isolated) <= set(result.bad_nodes)
    assert not any(was_isolated for _, was_isolated in placements)


def test_the_cli_compares_the_check_on_and_off(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--gpus", "160", "--days", "2", "--mtbf-hours", "1000000", "--spare-nodes", "4", "--seed", "0"]
    bad = ["--bad-node-share", "0.08", "--bad-mtbf-hours", "2", "--bad-precheck-finds", "0.5"]
    assert main(["simulate", *args, *bad, "--compare-isolation", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    on, off = data["compare"]
    assert (on["policy"], off["policy"]) == ("fault check on (isolation)", "fault check off")
    assert (on["bad_nodes"], on["isolated_nodes"], off["isolated_nodes"]) == (2, 2, 0)
    assert on["goodput"] > off["goodput"]
    assert main(["simulate", *args, "--compare-isolation"]) == 2
    assert "--compare-isolation needs bad nodes: give --bad-node-share" in capsys.readouterr().err
    assert main(["simulate", *args, "--bad-node-share", "2"]) == 2
    assert "is not a share from 0 to 1" in capsys.readouterr().err
