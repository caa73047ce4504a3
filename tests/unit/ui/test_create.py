"""The create page's job (trainguard.ui.create): each dialect's spelling of the form, and validation's verdict,
the same as ``trainguard validate`` gives for the YAML the page shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.api.load import load_bytes
from trainguard.cli.main import main
from trainguard.policy.faultcheck import enabled as check_enabled
from trainguard.ui.create import CHOICES, JobForm, draft
from trainguard.ui.pages import PageError

COMMAND = "python3 -c 'print(1)'"


def _form(dialect: str = "TrainingJob", **fields: Any) -> JobForm:
    choice = next(c for c in CHOICES if c.key == dialect)
    roles = fields.pop("roles", [{"name": choice.roles[0], "replicas": "2", "min": "1", "max": "3"}])
    return JobForm.from_dict(
        {"dialect": dialect, "name": "made", "command": COMMAND, "roles": roles, "image": "busybox", **fields}
    )


@pytest.mark.parametrize(
    ("dialect", "where"),
    [
        # (the document's apiVersion/kind, where the roles are, how auto restart is said)
        (
            "TrainingJob",
            ("trainguard.io/v1", "TrainingJob", "replicaSpecs", ("spec", "jobRetry", "retryNum")),
        ),
        (
            "AITrainingJob",
            (
                "kongming.cce.baiudbce.com/v1",
                "AITrainingJob",
                "replicaSpecs",
                ("spec", "jobRetry", "retryNum"),
            ),
        ),
        (
            "PyTorchJob",
            (
                "kubeflow.org/v1",
                "PyTorchJob",
                "pytorchReplicaSpecs",
                ("metadata", "annotations", "fault-tolerance/job-retry-num"),
            ),
        ),
        (
            "ModelArts",
            (
                "trainguard.io/v1",
                "TrainingJob",
                "replicaSpecs",
                ("metadata", "annotations", "fault-tolerance/job-retry-num"),
            ),
        ),
    ],
)
def test_each_dialect_spells_the_form_its_own_way_and_means_the_same(
    dialect: str, where: tuple[str, str, str, tuple[str, ...]]
) -> None:
    api_version, kind, roles_field, retry_path = where
    made = draft(_form(dialect, retries="5", hang_restart=True, hang_timeout="1800", live=True))
    assert made.problems == ()
    document = made.document
    assert (document["apiVersion"], document["kind"]) == (api_version, kind)
    assert roles_field in document["spec"]
    value: Any = document
    for key in retry_path:
        value = value[key]
    assert str(value) == "5"
    # The same job whatever the dialect: the roles' sizes, the job retry, the hang restart, the check, live.
    job = made.job.job
    [(role, spec)] = job.spec.replica_specs.items()
    assert (role.lower(), spec.replicas, spec.min_count, spec.max_count) == (
        next(c for c in CHOICES if c.key == dialect).roles[0].lower(), 2, 1, 3)  # fmt: skip
    assert spec.argv == ["python3", "-c", "print(1)"]
    assert spec.container["image"] == "busybox"
    assert job.spec.job_retry is not None
    assert job.spec.job_retry.retry_num == 5
    assert job.spec.hang is not None
    assert (job.spec.hang.enabled, job.spec.hang.timeout_seconds) == (True, 1800)
    assert check_enabled(job)
    assert job.metadata.annotations["trainguard.io/live"] == "true"


@pytest.mark.parametrize("dialect", [c.key for c in CHOICES])
def test_the_hang_timeout_is_said_in_every_dialect(dialect: str) -> None:
    job = draft(_form(dialect, hang_restart=True, hang_timeout="60")).job.job
    assert job.spec.hang is not None
    assert (job.spec.hang.enabled, job.spec.hang.timeout_seconds, job.spec.hang.max_consecutive) == (
        True,
        60,
        3,
    )


@pytest.mark.parametrize("dialect", [c.key for c in CHOICES])
def test_switches_off_are_off(dialect: str) -> None:
    job = draft(_form(dialect, auto_restart=False, hang_restart=False, fault_check=False)).job.job
    assert job.spec.job_retry is None
    assert job.spec.hang is None or not job.spec.hang.enabled
    assert not check_enabled(job)
    assert "trainguard.io/live" not in job.metadata.annotations
    assert all(spec.restart_policy.value == "Never" for spec in job.spec.replica_specs.values())


@pytest.mark.parametrize("dialect", [c.key for c in CHOICES])
@pytest.mark.parametrize("retries", ["0", "129", ""])
def test_a_bad_retry_count_gets_validates_words_for_that_yaml(
    dialect: str, retries: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    made = draft(_form(dialect, retries=retries))
    assert not made.valid
    with pytest.raises(PageError, match="nothing was submitted"):
        made.job  # noqa: B018
    # trainguard validate on the same text, in a file of the same name: the same lines, no more.
    path = tmp_path / made.file
    path.write_text(made.text)
    assert main(["validate", str(path)]) == 2
    said = capsys.readouterr().err.removeprefix("error:").strip().replace(str(tmp_path) + "/", "")
    assert said.splitlines() == list(made.problems)
    assert any(("retryNum" in p or "job-retry-num" in p) for p in made.problems), made.problems


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([c.key for c in CHOICES]), st.integers(-5, 300))
def test_any_retry_count_is_valid_exactly_within_1_to_128(dialect: str, retries: int) -> None:
    made = draft(_form(dialect, retries=retries))
    assert made.valid == (1 <= retries <= 128), made.problems


def test_the_yaml_shown_is_the_job_validated() -> None:
    made = draft(_form("PyTorchJob"))
    [loaded] = load_bytes(made.text.encode(), made.file)
    assert loaded.job == made.job.job
    assert loaded.dialect == "PyTorchJob"


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"name": ""}, "metadata.name"),
        ({"name": "Bad_Name"}, "metadata.name"),
        ({"hang_restart": True, "hang_timeout": "0"}, "spec.hang.timeoutSeconds"),
        (
            {"roles": [{"name": "worker", "replicas": "4", "min": "1", "max": "3"}]},
            "replicas 4 outside [1, 3]",
        ),
        ({"command": "python3 -c 'print(1)"}, "command: No closing quotation"),
    ],
)
def test_bad_fields_are_named(fields: dict[str, Any], problem: str) -> None:
    made = draft(_form(**fields))
    assert not made.valid
    assert any(problem in p for p in made.problems), made.problems


@pytest.mark.parametrize(
    ("dialect", "fields", "note"),
    [
        ("PyTorchJob", {"roles": [{"name": "Master", "replicas": "1", "min": "1"}]}, "has no min or max"),
        ("TrainingJob", {"live": True}, "choose the framework pytorch"),
        ("TrainingJob", {"image": ""}, "no image"),
    ],
)
def test_what_a_dialect_cannot_say_is_noted(dialect: str, fields: dict[str, Any], note: str) -> None:
    assert any(note in n for n in draft(_form(dialect, **fields)).notes)


def test_the_pytorchjob_worker_is_elastic_and_its_master_has_one_replica() -> None:
    roles = [{"name": "Master", "replicas": "1"}, {"name": "Worker", "replicas": "2", "min": "1", "max": "4"}]
    made = draft(_form("PyTorchJob", roles=roles))
    assert made.document["spec"]["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 4}
    assert made.document["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "name"
    ] == ("pytorch")
    bad = draft(_form("PyTorchJob", roles=[{"name": "Master", "replicas": "2"}]))
    assert any("exactly one Master" in p for p in bad.problems), bad.problems


@pytest.mark.parametrize(
    "body",
    [None, [], {"roles": []}, {"roles": "worker"}, {"auto_restart": "yes"}, {"name": 3}, {"dialect": "Nope"}],
)
def test_a_form_no_page_sends_is_refused(body: Any) -> None:
    with pytest.raises(PageError):
        draft(JobForm.from_dict(body))
