"""Restarts of workers that torchrun carried out inside a pod (``AgentReport.worker_restarts``): each one is
recorded once in the history (rule torchrun, action restart-workers, not counted) with a Warning Event, and
nothing is relaunched or counted; a relaunched pod starts its own numbering again."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.unit.controller.harness import Harness, worker_job
from trainguard.controller import EmitEvent

W0 = "job-worker-0"


def _recorded(h: Harness) -> list[tuple[str | None, int | None, str, str, bool]]:
    return [
        (e.pod, e.exit_code, e.action.value, e.rule or "", e.counted)
        for e in h.status.history
        if e.action.value == "restart-workers"
    ]


def _events(h: Harness) -> list[str]:
    return [
        action.pod or ""
        for result in h.results
        for action in result.actions
        if isinstance(action, EmitEvent) and action.reason == "WorkersRestarted"
    ]


@dataclass(frozen=True)
class Case:
    id: str
    exit_codes: tuple[int, ...]
    #: The agent keeps only its latest N restarts (None: all).
    keep: int | None
    #: Reconciles between two restarts (0: several restarts arrive in one observation).
    between: int


CASES = [
    Case("one restart", (137,), None, 1),
    Case("three restarts, each seen", (137, 1, 139), None, 1),
    Case("three restarts seen at once", (137, 1, 139), None, 0),
    Case("an agent that keeps only the latest two: none lost, none twice", (1, 2, 3, 4, 5), 2, 1),
]


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_each_restart_inside_a_pod_is_recorded_once_and_counts_nothing(case: Case) -> None:
    h = Harness.start(worker_job(1))
    h.running()
    for code in case.exit_codes:
        h.cluster.restart_workers(W0, code, keep=case.keep)
        for _ in range(case.between):
            h.tick()
    for _ in range(3):
        h.tick()
    assert _recorded(h) == [(W0, code, "restart-workers", "torchrun", False) for code in case.exit_codes]
    assert _events(h) == [W0] * len(case.exit_codes)
    pod = h.pod(W0)
    assert (pod.restarts, pod.hang_restarts, pod.generation) == (0, 0, 1)
    assert h.status.restart_counts.get("worker", 0) == 0


def test_a_relaunched_pod_numbers_its_restarts_from_the_start_again() -> None:
    h = Harness.start(worker_job(1))
    h.running()
    h.cluster.restart_workers(W0, 1)
    h.tick()
    h.cluster.exit(W0, 137, signal=9)  # torchrun gave up: the pod ends, the policy relaunches it
    h.run_until(lambda h: h.pod(W0).generation == 2 and h.pod(W0).phase.value == "Running")
    h.cluster.restart_workers(W0, 2)
    for _ in range(3):
        h.tick()
    assert [(e.action.value, e.exit_code) for e in h.status.history] == [
        ("restart-workers", 1),
        ("restart", 137),
        ("restart-workers", 2),
    ]
