"""The state machines: terminal phases have no exits, everything is reachable, bad moves are refused."""

from __future__ import annotations

import pytest

from trainguard.controller import JOB_TRANSITIONS, POD_TRANSITIONS, JobPhase, PodPhase
from trainguard.controller.phases import TransitionError, check_job_transition, check_pod_transition


def reachable(start: JobPhase | PodPhase, table: dict) -> set:  # type: ignore[type-arg]
    seen, todo = {start}, [start]
    while todo:
        for nxt in table[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize("phase", [JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.TIMEOUT])
def test_terminal_job_phases_have_no_exits(phase: JobPhase) -> None:
    assert phase.is_terminal
    assert JOB_TRANSITIONS[phase] == frozenset()
    for target in JobPhase:
        if target is not phase:
            with pytest.raises(TransitionError, match=f"{phase.value} cannot become {target.value}"):
                check_job_transition(phase, target)


def test_only_the_three_ends_are_terminal() -> None:
    assert {p for p in JobPhase if p.is_terminal} == {JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.TIMEOUT}


def test_every_job_phase_is_reachable_from_pending_and_every_live_phase_can_end() -> None:
    assert reachable(JobPhase.PENDING, dict(JOB_TRANSITIONS)) == set(JobPhase)
    for phase in JobPhase:
        if not phase.is_terminal:
            assert JOB_TRANSITIONS[phase] & {JobPhase.FAILED, JobPhase.TIMEOUT}


def test_a_suspended_job_only_resumes_from_pending() -> None:
    with pytest.raises(TransitionError):
        check_job_transition(JobPhase.SUSPENDED, JobPhase.RUNNING)
    check_job_transition(JobPhase.SUSPENDED, JobPhase.PENDING)


def test_a_removed_pod_slot_has_no_exits() -> None:
    assert {p for p in PodPhase if p.is_terminal} == {PodPhase.REMOVED}
    for target in PodPhase:
        if target is not PodPhase.REMOVED:
            with pytest.raises(TransitionError):
                check_pod_transition(PodPhase.REMOVED, target)


@pytest.mark.parametrize("phase", [PodPhase.SUCCEEDED, PodPhase.FAILED])
def test_a_finished_pod_slot_can_only_be_scaled_away(phase: PodPhase) -> None:
    assert POD_TRANSITIONS[phase] == {PodPhase.REMOVED}


def test_every_pod_phase_is_reachable_from_waiting() -> None:
    assert reachable(PodPhase.WAITING, dict(POD_TRANSITIONS)) == set(PodPhase)


def test_staying_in_a_phase_is_not_a_transition() -> None:
    for phase in JobPhase:
        check_job_transition(phase, phase)
