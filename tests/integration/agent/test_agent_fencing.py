"""Fencing, the real agent on real processes (``trainguard.agent.lease``): the command starts after the first
renewal of the pod's lease; the agent ends the command's whole tree at once when the operator says the pod is
gone, and when no renewal succeeded for its bound; answers that decide nothing (an operator restarting) end
nothing within the bound."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_harness import AgentRun, LeaseOperator, gone, wait_for

from trainguard.pod import contract

pytestmark = pytest.mark.integration

#: The agent's bound in these tests (it renews every BOUND / 6 s).
BOUND = 3.0


@pytest.fixture
def operator() -> Iterator[LeaseOperator]:
    server = LeaseOperator(200)
    yield server
    server.stop()


def _start(start_agent: Any, operator: LeaseOperator, tmp_path: Path) -> AgentRun:
    token = tmp_path / "token"
    token.write_text("pod-token\n")
    options = ["--lease-url", operator.url, "--fence-after", f"{BOUND:g}", "--report-token", str(token)]
    return start_agent(
        [*options, "--grace", "5"], ["tree", "--pids", "pids", "--then", "sleep", "--ignore-term"]
    )


def _tree(run: AgentRun) -> list[int]:
    path = run.directory / "pids"
    text = wait_for(lambda: path.exists() and path.read_text().strip(), 15, "the tree's pids", run.describe)
    return [int(pid) for pid in text.split()]


def _ended_at(run: AgentRun, pids: list[int], timeout: float) -> float:
    """When the whole tree was first seen gone (polled every 20 ms)."""
    wait_for(lambda: all(gone(pid) for pid in pids), timeout, "the tree to be gone", run.describe)
    return time.monotonic()


def _fenced(run: AgentRun) -> None:
    assert run.wait_exit() == contract.EXIT_FENCED
    (final,) = run.events("exited")
    assert (final["exit_code"], final["reason"]) == (contract.EXIT_FENCED, contract.REASON_FENCED)


@pytest.mark.parametrize("status", [410, 401, 403])
def test_a_pod_said_gone_ends_its_whole_tree_at_once(
    start_agent: Any, operator: LeaseOperator, tmp_path: Path, status: int
) -> None:
    run = _start(start_agent, operator, tmp_path)
    pids = _tree(run)
    # Renewed: the command runs on past the bound (twice over), nothing ends.
    wait_for(lambda: len(operator.renewed) >= 13, 15, "renewals for twice the bound", run.describe)
    assert not any(gone(pid) for pid in pids)
    assert run.process.poll() is None
    operator.status = status
    said_at = time.monotonic()
    ended = _ended_at(run, pids, BOUND)  # at the next renewal (every BOUND / 6 s), not after the bound
    assert ended - said_at < BOUND / 6 + 1.5
    _fenced(run)
    assert operator.tokens == {"Bearer pod-token"}
    assert "the operator says this pod is gone" in run.stderr.read_text()


@pytest.mark.parametrize("silence", ["503", "no answer", "down"])
def test_an_operator_unreachable_past_the_bound_ends_the_tree_and_not_before(
    start_agent: Any, operator: LeaseOperator, tmp_path: Path, silence: str
) -> None:
    run = _start(start_agent, operator, tmp_path)
    pids = _tree(run)
    wait_for(lambda: len(operator.renewed) >= 2, 10, "two renewals", run.describe)
    if silence == "down":
        operator.stop()
    else:
        operator.status = 503 if silence == "503" else None
    last = operator.renewed[-1]  # when the last renewal arrived: it was sent just before
    ended = _ended_at(run, pids, 2 * BOUND + 5)
    assert ended - last >= BOUND - 0.1  # not before the bound (the margin: the request's own trip)
    assert ended - last < BOUND + 2.0
    _fenced(run)
    assert "no lease renewal for" in run.stderr.read_text()


def test_no_answer_for_less_than_the_bound_ends_nothing(
    start_agent: Any, operator: LeaseOperator, tmp_path: Path
) -> None:
    """An operator restarting (503, then nothing, then answers again) within the bound ends no worker."""
    run = _start(start_agent, operator, tmp_path)
    pids = _tree(run)
    wait_for(lambda: len(operator.renewed) >= 2, 10, "two renewals", run.describe)
    operator.status = 503
    last = operator.renewed[-1]
    wait_for(lambda: time.monotonic() - last > BOUND / 3, 5, "a third of the bound")
    operator.status = None
    wait_for(lambda: time.monotonic() - last > 2 * BOUND / 3, 5, "two thirds of the bound")
    operator.status = 200
    count = len(operator.renewed)
    wait_for(lambda: len(operator.renewed) > count + 8, 10, "renewals again, past the bound", run.describe)
    assert not any(gone(pid) for pid in pids)
    assert run.process.poll() is None
    os.kill(run.process.pid, signal.SIGTERM)
    assert run.wait_exit() != contract.EXIT_FENCED
    assert not [e for e in run.events("exited") if e.get("reason") == contract.REASON_FENCED]


def test_the_command_starts_after_the_first_renewal(
    start_agent: Any, operator: LeaseOperator, tmp_path: Path
) -> None:
    operator.status = 503
    run = _start(start_agent, operator, tmp_path)
    wait_for(lambda: operator.asked >= 3, 10, "three tries", run.describe)
    assert not (run.directory / "pids").exists()
    assert not run.events("started")
    operator.status = 200
    pids = _tree(run)
    assert run.events("started")
    operator.status = 410
    _ended_at(run, pids, BOUND)
    _fenced(run)


def test_a_pod_gone_before_its_first_renewal_never_starts_its_command(
    start_agent: Any, operator: LeaseOperator, tmp_path: Path
) -> None:
    operator.status = 410
    run = _start(start_agent, operator, tmp_path)
    _fenced(run)
    assert not (run.directory / "pids").exists()
    assert not run.events("started")
    assert "the command is not started" in run.stderr.read_text()


def test_fencing_needs_both_options(start_agent: Any, tmp_path: Path) -> None:
    run = start_agent(["--fence-after", "3"], ["exit", "0"])
    assert run.wait_exit() == 2
    assert "--fence-after needs --lease-url URL too" in run.stderr.read_text()
