"""ModelArts-style annotations, on a job or in an overlay file as ModelArts' documentation writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.api.jobdata import CCE_JOB, OVERLAY, cce_job, edited, error_of, load_one, native, pytorchjob
from trainguard.api import SpecError
from trainguard.api.load import load_jobs, load_overlay


def annotated(job: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return edited(
        job,
        "metadata.annotations",
        {f"fault-tolerance/{k.replace('_', '-')}": v for k, v in annotations.items()},
    )


def write(tmp_path: Path, name: str, content: Any) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_retry_num_sets_job_level_retries() -> None:
    spec = load_one(annotated(native(), job_retry_num="3")).job.spec
    assert spec.job_retry is not None
    assert spec.job_retry.retry_num == 3
    assert spec.job_retry.unconditional is False


def test_unconditional_retry() -> None:
    spec = load_one(annotated(native(), job_retry_num="5", job_unconditional_retry="true")).job.spec
    assert spec.job_retry is not None
    assert spec.job_retry.unconditional is True
    assert spec.job_retry.unconditional_max_consecutive == 3


def test_hang_retry_turns_on_restart_upon_suspension() -> None:
    spec = load_one(annotated(native(), hang_retry="true")).job.spec
    assert spec.hang is not None
    assert spec.hang.enabled
    assert spec.hang.max_consecutive == 3


def test_hang_retry_keeps_the_jobs_own_hang_settings() -> None:
    job = native(hang={"timeoutSeconds": 60, "maxConsecutive": 5, "enabled": False})
    hang = load_one(annotated(job, hang_retry="True")).job.spec.hang
    assert hang is not None
    assert (hang.enabled, hang.timeout_seconds, hang.max_consecutive) == (True, 60, 5)


def test_hang_retry_false_turns_it_off() -> None:
    hang = load_one(annotated(native(hang={"timeoutSeconds": 60}), hang_retry="false")).job.spec.hang
    assert hang is not None
    assert hang.enabled is False


def test_annotations_work_on_every_dialect() -> None:
    for job in (cce_job(), pytorchjob(), native()):
        spec = load_one(annotated(job, job_retry_num="128", hang_retry="true")).job.spec
        assert spec.job_retry is not None
        assert spec.job_retry.retry_num == 128
        assert spec.hang is not None
        assert spec.hang.enabled


@pytest.mark.parametrize("value", ["0", "129", "200", "-1", "three", "", "1.5", "²"])
def test_retry_num_outside_its_range(value: str) -> None:
    (problem,) = error_of(annotated(native(), job_retry_num=value)).problems
    assert problem.message == f'fault-tolerance/job-retry-num "{value}": must be 1-128'
    assert problem.path == 'metadata.annotations["fault-tolerance/job-retry-num"]'


def test_unknown_fault_tolerance_annotation_warns() -> None:
    loaded = load_one(annotated(native(), hang_retries="true"))
    (warning,) = loaded.warnings
    assert "fault-tolerance/hang-retries is not a fault-tolerance annotation trainguard reads" in warning
    assert "(did you mean fault-tolerance/hang-retry?)" in warning


def test_the_modelarts_overlay_on_the_cce_job() -> None:
    (loaded,) = load_jobs(CCE_JOB, [OVERLAY])
    spec = loaded.job.spec
    assert spec.job_retry is not None
    assert spec.job_retry.retry_num == 3
    assert spec.hang is not None
    assert spec.hang.enabled
    assert spec.hang.max_consecutive == 3
    assert loaded.job.metadata.annotations == {
        "fault-tolerance/job-retry-num": "3",
        "fault-tolerance/hang-retry": "true",
    }
    # The converted job carries its annotations and their effect, and reads back the same.
    assert load_one(loaded.job.to_dict()).job == loaded.job


def test_overlays_replace_the_jobs_annotations_and_each_other(tmp_path: Path) -> None:
    job = write(tmp_path, "job.json", annotated(native(), job_retry_num="2"))
    first = write(
        tmp_path,
        "a.json",
        {"kind": "job", "metadata": {"annotations": {"fault-tolerance/job-retry-num": "5"}}},
    )
    second = write(tmp_path, "b.yaml", "metadata:\n  annotations:\n    fault-tolerance/job-retry-num: '7'\n")
    (loaded,) = load_jobs(job, [first, second])
    assert loaded.job.spec.job_retry is not None
    assert loaded.job.spec.job_retry.retry_num == 7


def test_a_bad_value_in_an_overlay_names_the_overlay(tmp_path: Path) -> None:
    overlay = write(
        tmp_path,
        "o.json",
        {"kind": "job", "metadata": {"annotations": {"fault-tolerance/job-retry-num": "200"}}},
    )
    with pytest.raises(SpecError) as info:
        load_jobs(CCE_JOB, [overlay])
    (problem,) = info.value.problems
    assert problem.file == str(overlay)
    assert str(problem) == (
        f'{overlay}: metadata.annotations["fault-tolerance/job-retry-num"]: '
        'fault-tolerance/job-retry-num "200": must be 1-128'
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"kind": "pod", "metadata": {"annotations": {"a": "b"}}}, 'kind "pod": an overlay has kind "job"'),
        ({"kind": "job"}, "an overlay needs annotations"),
        ({"kind": "job", "metadata": {"annotations": {}}}, "an overlay needs annotations"),
        (
            {"kind": "job", "metadata": {"annotations": {"fault-tolerance/hang-retry": True}}},
            'must be a string, not true (quote it: "true")',
        ),
        (
            {"kind": "job", "spec": {}, "metadata": {"annotations": {"a": "b"}}},
            'unknown field "spec"; allowed here: kind, metadata',
        ),
        ({"kind": "job", "metadata": {"labels": {}, "annotations": {"a": "b"}}}, 'unknown field "labels"'),
        (["kind", "job"], "an overlay is a mapping like"),
        ("", "an overlay file holds one document; this one holds nothing"),
        ("kind: job\n---\nkind: job\n", "an overlay file holds one document; this one holds 2 documents"),
    ],
)
def test_bad_overlays(tmp_path: Path, content: Any, message: str) -> None:
    overlay = write(tmp_path, "overlay.yaml", content)
    with pytest.raises(SpecError) as info:
        load_overlay(overlay)
    assert message in str(info.value)
    assert str(info.value).startswith(str(overlay))
