"""The hang and scaling timeouts by annotation, on every dialect (``trainguard.api.timeouts``)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.jobdata import cce_job, edited, error_of, load_one, native, pytorchjob

HANG = "trainguard.io/hang-timeout-seconds"
SCALING = "trainguard.io/scaling-timeout-seconds"


def annotated(job: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return edited(job, "metadata.annotations", annotations)


@pytest.mark.parametrize("job", [cce_job, pytorchjob, native], ids=["aitrainingjob", "pytorchjob", "native"])
def test_both_timeouts_on_every_dialect(job: Any) -> None:
    spec = load_one(annotated(job(), **{HANG: "600", SCALING: "120"})).job.spec
    assert spec.scaling.timeout_seconds == 120
    assert spec.hang is not None
    assert (spec.hang.timeout_seconds, spec.hang.enabled) == (
        600,
        False,
    )  # the timeout alone turns nothing on


def test_the_defaults_without_annotations() -> None:
    spec = load_one(pytorchjob()).job.spec
    assert (spec.scaling.timeout_seconds, spec.scaling.on_timeout.value) == (600, "RollBack")
    assert spec.hang is None


def test_with_modelarts_hang_retry_the_timeout_is_that_of_restart_upon_suspension() -> None:
    job = annotated(pytorchjob(), **{HANG: "900", "fault-tolerance/hang-retry": "true"})
    hang = load_one(job).job.spec.hang
    assert hang is not None
    assert (hang.enabled, hang.timeout_seconds, hang.max_consecutive) == (True, 900, 3)


def test_an_annotation_wins_over_the_field_it_sets() -> None:
    job = annotated(native(scaling={"timeoutSeconds": 50, "onTimeout": "Fail"}, hang={"timeoutSeconds": 60}),
                    **{SCALING: "70", HANG: "80"})  # fmt: skip
    spec = load_one(job).job.spec
    assert (spec.scaling.timeout_seconds, spec.scaling.on_timeout.value) == (70, "Fail")
    assert spec.hang is not None
    assert (spec.hang.timeout_seconds, spec.hang.enabled) == (80, True)


@pytest.mark.parametrize("key", [HANG, SCALING])
@pytest.mark.parametrize("value", ["0", "ten", "1.5", "-3", "", "604801"])
def test_a_bad_value_names_the_annotation_and_the_fix(key: str, value: str) -> None:
    (problem,) = error_of(annotated(pytorchjob(), **{key: value})).problems
    assert problem.path == f'metadata.annotations["{key}"]'
    assert problem.message == f'{key} "{value}": give a whole number of seconds from 1 to 604800, e.g. "600"'


def test_a_bad_scaling_field_names_it() -> None:
    (problem,) = error_of(native(scaling={"timeoutSeconds": 0})).problems
    assert "spec.scaling.timeoutSeconds" in problem.path
    (problem,) = error_of(native(scaling={"onTimeout": "Retry"})).problems
    assert "spec.scaling.onTimeout" in problem.path
    assert "RollBack" in problem.message
