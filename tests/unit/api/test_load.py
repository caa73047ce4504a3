"""load_jobs and friends: files, several documents, JSON, objects from the Kubernetes API."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from tests.unit.api.jobdata import CCE_JOB, cce_job, native, pytorchjob
from trainguard.api import SpecError
from trainguard.api.documents import MAX_FILE_BYTES
from trainguard.api.load import load_bytes, load_jobs, load_object


def message_of(path: str | Path) -> str:
    with pytest.raises(SpecError) as info:
        load_jobs(path)
    (problem,) = info.value.problems
    return str(problem)


def test_several_jobs_in_one_file_in_several_dialects(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all([native(), pytorchjob(), cce_job()]))
    assert [(j.dialect, j.job.name) for j in load_jobs(path)] == [
        ("TrainingJob", "small"),
        ("PyTorchJob", "torch"),
        ("AITrainingJob", "test-horovod-elastic"),
    ]


def test_json_job_file(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(cce_job()))
    assert load_jobs(path)[0].job == load_jobs(CCE_JOB)[0].job


def test_missing_file() -> None:
    assert message_of("/no/such/job.yaml") == "/no/such/job.yaml: no such file"


def test_directory(tmp_path: Path) -> None:
    assert message_of(tmp_path) == f"{tmp_path}: is a directory; give a job file (YAML or JSON)"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads everything")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text("a: 1\n")
    path.chmod(0)
    assert message_of(path) == f"{path}: cannot be read: permission denied"


def test_a_path_through_a_file(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("a: 1\n")
    assert (
        message_of(tmp_path / "job.yaml" / "x") == f"{tmp_path}/job.yaml/x: cannot be read: Not a directory"
    )


def test_endless_file_is_not_read_to_the_end() -> None:
    assert f"larger than {MAX_FILE_BYTES} bytes, the most a job file may have" in message_of("/dev/zero")


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "---\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    assert message_of(path) == f"{path}: the file is empty: it holds no job"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("- a\n- b\n", "a list"),
        ("just words\n", 'a single value ("just words")'),
        ("42\n", "a single value (42)"),
    ],
)
def test_documents_that_are_not_mappings(text: str, kind: str) -> None:
    with pytest.raises(
        SpecError, match=re.escape(f"document 1 is {kind}; a job is a mapping with apiVersion, kind")
    ):
        load_bytes(text.encode(), "job.yaml")


def test_an_object_from_the_kubernetes_api() -> None:
    loaded = load_object(cce_job(), "aitrainingjobs/default/test-horovod-elastic")
    assert loaded.dialect == "AITrainingJob"
    assert loaded.job == load_jobs(CCE_JOB)[0].job


def test_an_object_that_is_not_plain_data() -> None:
    with pytest.raises(SpecError, match="not plain JSON data"):
        load_object({"apiVersion": object()}, "api")
    with pytest.raises(SpecError, match="not plain JSON data"):
        load_object({"x": float("nan")}, "api")


def test_object_errors_have_paths_but_no_lines() -> None:
    job = native()
    job["spec"]["replicaSpecs"]["worker"]["restartPolicy"] = "Sometimes"
    with pytest.raises(SpecError) as info:
        load_object(job, "trainingjobs/default/small")
    (problem,) = info.value.problems
    assert (problem.file, problem.path, problem.line) == (
        "trainingjobs/default/small",
        "spec.replicaSpecs.worker.restartPolicy",
        None,
    )
