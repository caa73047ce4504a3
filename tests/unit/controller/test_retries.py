"""A failed reconcile is tried again after the job's own backoff, the same on every driver
(``trainguard.controller.retries``), and after a conflicting status write the job is decided again at once
(``trainguard.controller.loop``)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.controller import Applied, JobStatus
from trainguard.controller.loop import AFTER_CONFLICT_SECONDS, StepResult
from trainguard.controller.reconcile import ReconcileResult
from trainguard.controller.retries import BACKOFF_BASE, BACKOFF_MAX, Retries, Retry, retry_delay


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (10, 256.0), (11, 300.0), (12, 300.0), (10_000, 300.0)],
)
def test_the_delay_doubles_from_the_base_up_to_the_cap(failures: int, delay: float) -> None:
    assert (BACKOFF_BASE, BACKOFF_MAX) == (0.5, 300.0)  # the operator's figures
    assert retry_delay(failures) == delay


@given(st.integers(1, 10**6))
def test_the_delay_never_shrinks_and_stays_within_base_and_cap(failures: int) -> None:
    assert BACKOFF_BASE <= retry_delay(failures) <= retry_delay(failures + 1) <= BACKOFF_MAX


@given(st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), max_size=40))
def test_each_key_backs_off_on_its_own_and_a_success_starts_it_again(events: list[tuple[str, bool]]) -> None:
    retries: Retries[str] = Retries()
    streaks = dict.fromkeys("abc", 0)
    for key, fails in events:
        if fails:
            streaks[key] += 1
            assert retries.failed(key) == Retry(streaks[key], retry_delay(streaks[key]))
        else:
            streaks[key] = 0
            retries.succeeded(key)


def test_one_log_line_a_step_with_the_traceback_once(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.retries")
    retries: Retries[str] = Retries()
    caplog.set_level(logging.WARNING, "test.retries")
    for _ in range(3):
        try:
            raise RuntimeError("the store said no\nand more lines")
        except RuntimeError as error:
            retries.failed("job a").log(logger, "reconcile of job a", error)
    assert [(r.levelname, r.exc_info is not None) for r in caplog.records] == [
        ("ERROR", True),
        ("WARNING", False),
        ("WARNING", False),
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "reconcile of job a failed; trying again in 0.5 s",
        "reconcile of job a failed again (2 in a row): RuntimeError: the store said no; trying again in 1.0 s",
        "reconcile of job a failed again (3 in a row): RuntimeError: the store said no; trying again in 2.0 s",
    ]


@pytest.mark.parametrize(
    ("conflict", "wake_at", "again"),
    [
        (False, None, None),
        (False, 20.0, 20.0),
        (True, None, 10.0 + AFTER_CONFLICT_SECONDS),
        (True, 20.0, 10.05),
    ],
)
def test_after_a_conflict_the_job_is_decided_again_at_once(
    conflict: bool, wake_at: float | None, again: float | None
) -> None:
    stepped = StepResult.of(ReconcileResult(JobStatus(), (), wake_at), Applied(conflict=conflict))
    assert stepped.again_at(10.0) == again
    assert (stepped.status, stepped.wake_at, stepped.applied.conflict) == (JobStatus(), wake_at, conflict)
