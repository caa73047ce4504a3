"""CCE's AITrainingJob example loads unchanged, every field kept; both spellings of its group are read."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.api.jobdata import CCE_JOB, cce_job, edited, error_of, load_one
from trainguard.api import ExceptionalEvent, ExitCodeSet, RestartPolicy, RestartScope
from trainguard.api.load import load_jobs


def leaves(data: Any, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    """Every scalar of a document by its path (empty mappings and lists count as values)."""
    if isinstance(data, dict) and data:
        return {k: v for key, value in data.items() for k, v in leaves(value, (*path, key)).items()}
    if isinstance(data, list) and data:
        return {k: v for index, value in enumerate(data) for k, v in leaves(value, (*path, index)).items()}
    return {path: data}


def test_the_cce_example_file_loads_as_an_aitrainingjob() -> None:
    (loaded,) = load_jobs(CCE_JOB)
    assert loaded.dialect == "AITrainingJob"
    assert loaded.warnings == ()
    assert loaded.source == str(CCE_JOB)


def test_every_field_of_the_cce_example_is_kept() -> None:
    (loaded,) = load_jobs(CCE_JOB)
    raw = leaves({key: value for key, value in cce_job().items() if key not in ("apiVersion", "kind")})
    kept = leaves(loaded.job.to_dict())
    missing = {path: value for path, value in raw.items() if kept.get(path, "<absent>") != value}
    assert missing == {}


def test_the_cce_example_as_the_model_reads_it() -> None:
    job = load_one(cce_job()).job
    launcher, trainer = job.role("launcher"), job.role("trainer")
    assert (launcher.replicas, launcher.min_count, launcher.max_count) == (1, 1, 1)
    assert (trainer.replicas, trainer.min_count, trainer.max_count, trainer.is_elastic) == (3, 1, 5, True)
    assert launcher.restart_policy is RestartPolicy.ON_NODE_FAIL_WITH_EXIT_CODE
    first, second = launcher.fault_tolerant_policy
    assert first.exit_codes == ExitCodeSet.parse("129,101")
    assert first.restart_scope is RestartScope.POD
    assert second.exceptional_event == (ExceptionalEvent.NODE_NOT_READY,)
    (rule,) = trainer.fault_tolerant_policy
    assert rule.exceptional_event == (ExceptionalEvent.NODE_NOT_READY, ExceptionalEvent.POD_FORCE_DELETED)
    assert (trainer.restart_limit, trainer.restart_timeout, trainer.restart_time_limit) == (100, 864000, 60)
    assert job.spec.plugin == {"ssh": [""], "discovery": [""]}
    assert job.spec.priority == "normal"
    assert job.spec.fault_tolerant is True
    assert launcher.template["spec"]["containers"][0]["env"] is None  # kept as written, even when empty


def test_the_baidubce_spelling_is_read_too() -> None:
    loaded = load_one(edited(cce_job(), "apiVersion", "kongming.cce.baidubce.com/v1"))
    assert loaded.dialect == "AITrainingJob"
    assert loaded.job == load_one(cce_job()).job


def test_a_cluster_copy_with_status_and_server_fields_loads() -> None:
    data = cce_job()
    data["metadata"].update(uid="0b5c", resourceVersion="42", creationTimestamp="2022-01-14T09:01:50Z")
    data["status"] = {"RestartCount": {"trainer": 0}, "conditions": [{"type": "Running", "status": "True"}]}
    assert load_one(data).job.spec == load_one(cce_job()).job.spec


def test_codes_no_process_can_report_are_accepted_with_a_warning() -> None:
    path = "spec.replicaSpecs.launcher.faultTolerantPolicy.0.exitCodes"
    loaded = load_one(edited(cce_job(), path, "129,10001"))
    (warning,) = loaded.warnings
    assert re.fullmatch(
        r"job.yaml:\d+: spec.replicaSpecs.launcher.faultTolerantPolicy\[0\].exitCodes: "
        r'exitCodes "129,10001": codes above 255 cannot occur \(exit statuses are 0-255\); using "129"',
        warning,
    )
    assert str(loaded.job.role("launcher").fault_tolerant_policy[0].exit_codes) == "129"


def test_a_rule_of_impossible_codes_only_is_left_out() -> None:
    data = edited(cce_job(), "spec.replicaSpecs.launcher.faultTolerantPolicy.0.exitCodes", "10001")
    loaded = load_one(data)
    assert "this rule can never match and is left out" in loaded.warnings[0]
    (rule,) = loaded.job.role("launcher").fault_tolerant_policy
    assert rule.exceptional_event == (ExceptionalEvent.NODE_NOT_READY,)


def test_errors_after_a_left_out_rule_point_at_the_rule_as_written() -> None:
    data = edited(cce_job(), "spec.replicaSpecs.launcher.faultTolerantPolicy.0.exitCodes", "10001")
    data = edited(data, "spec.replicaSpecs.launcher.faultTolerantPolicy.1.restartScope", "Everywhere")
    (problem,) = error_of(data).problems
    assert problem.path == "spec.replicaSpecs.launcher.faultTolerantPolicy[1].restartScope"


@pytest.mark.parametrize("codes", ["1-300", "250-10001,7"])
def test_ranges_are_cut_at_255(codes: str) -> None:
    loaded = load_one(edited(cce_job(), "spec.replicaSpecs.launcher.faultTolerantPolicy.0.exitCodes", codes))
    assert loaded.job.role("launcher").fault_tolerant_policy[0].exit_codes is not None
    assert loaded.job.role("launcher").fault_tolerant_policy[0].exit_codes.highest == 255


def test_the_cce_example_converted_to_native_form_loads_back_the_same() -> None:
    job = load_one(cce_job()).job
    again = load_one(job.to_dict())
    assert again.dialect == "TrainingJob"
    assert again.job == job
