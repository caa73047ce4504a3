"""Kubeflow PyTorchJob meanings: restartPolicy Always/OnFailure/Never/ExitCode per role, runPolicy.backoffLimit."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.unit.policy.jobs import exited, first_decision, run
from trainguard.api import TrainingJob
from trainguard.api.load import load_jobs
from trainguard.policy import Outcome, PodRef, PolicyState, Remedy, apply_decision, outcome

WORKER = PodRef("Worker", 1)


def pytorchjob(tmp_path: Path, restart_policy: str, backoff_limit: int | None = None) -> TrainingJob:
    """A PyTorchJob with a Master and two Workers, read by the loader with Kubeflow's meanings."""
    template = {
        "spec": {"containers": [{"name": "pytorch", "image": "torch", "command": ["python", "t.py"]}]}
    }
    specs = {
        name: {"replicas": count, "restartPolicy": restart_policy, "template": template}
        for name, count in (("Master", 1), ("Worker", 2))
    }
    document = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "kf"},
        "spec": {"pytorchReplicaSpecs": specs},
    }
    if backoff_limit is not None:
        document["spec"]["runPolicy"] = {"backoffLimit": backoff_limit}
    path = tmp_path / "pytorchjob.yaml"
    path.write_text(yaml.safe_dump(document))
    (loaded,) = load_jobs(path)
    assert loaded.dialect == "PyTorchJob"
    return loaded.job


def test_exit_code_retries_137(tmp_path: Path) -> None:
    decision = first_decision(pytorchjob(tmp_path, "ExitCode"), exited(WORKER, 137))
    assert (decision.action, decision.rule) == (Remedy.RESTART, "restartPolicy")


@pytest.mark.parametrize("code", [1, 2, 127])
def test_exit_code_fails_the_job_on_a_permanent_code(tmp_path: Path, code: int) -> None:
    training_job = pytorchjob(tmp_path, "ExitCode")
    decision = first_decision(training_job, exited(WORKER, code))
    assert decision.action is Remedy.FAIL_JOB
    assert outcome(training_job, apply_decision(PolicyState(), decision, 0.0)).result is Outcome.FAILED


@pytest.mark.parametrize("code", [1, 137])
def test_never_a_failed_worker_fails_the_job(tmp_path: Path, code: int) -> None:
    training_job = pytorchjob(tmp_path, "Never")
    decision = first_decision(training_job, exited(WORKER, code))
    assert decision.action is Remedy.FAIL_JOB
    assert outcome(training_job, apply_decision(PolicyState(), decision, 0.0)).result is Outcome.FAILED


def test_on_failure_restarts_until_backoff_limit_then_fails_with_that_reason(tmp_path: Path) -> None:
    training_job = pytorchjob(tmp_path, "OnFailure", backoff_limit=3)
    faults = [exited(PodRef("Worker", t % 2), 1, float(t)) for t in range(4)]
    decisions, state = run(training_job, faults)
    assert [d.action for d in decisions] == [Remedy.RESTART] * 3 + [Remedy.FAIL_JOB]
    assert decisions[-1].limit == "backoffLimit"
    result = outcome(training_job, state)
    assert result.result is Outcome.FAILED
    assert "backoffLimit 3 is reached" in result.reason


def test_always_reruns_a_pod_that_succeeded(tmp_path: Path) -> None:
    decision = first_decision(pytorchjob(tmp_path, "Always"), exited(WORKER, 0))
    assert (decision.action, decision.counted) == (Remedy.RESTART, True)


def test_the_master_succeeding_ends_the_job(tmp_path: Path) -> None:
    training_job = pytorchjob(tmp_path, "OnFailure")
    decision = first_decision(training_job, exited(PodRef("master", 0), 0))
    state = apply_decision(PolicyState(), decision, 0.0)
    assert outcome(training_job, state).result is Outcome.SUCCEEDED
