"""ModelArts-style annotations: job-retry-num, job-unconditional-retry and hang-retry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.unit.policy.jobs import event, exited, job, role, run
from trainguard.api import RestartScope, TrainingJob
from trainguard.api.load import load_jobs
from trainguard.policy import FaultKind, Outcome, PodRef, Remedy, outcome, record_running

POD = PodRef("worker", 1)


def modelarts(tmp_path: Path, annotations: dict[str, str]) -> TrainingJob:
    """A native job whose roles never restart on their own, with ModelArts annotations as an overlay."""
    base = job({"launcher": role(1, restartPolicy="Never"), "worker": role(2, restartPolicy="Never")})
    path, overlay = tmp_path / "job.yaml", tmp_path / "overlay.json"
    path.write_text(yaml.safe_dump(base.to_dict()))
    overlay.write_text(json.dumps({"kind": "job", "metadata": {"annotations": annotations}}))
    (loaded,) = load_jobs(path, [overlay])
    return loaded.job


@pytest.mark.parametrize("retries", [1, 3])
def test_job_retry_num_restarts_the_job_n_times_for_environment_faults(tmp_path: Path, retries: int) -> None:
    training_job = modelarts(tmp_path, {"fault-tolerance/job-retry-num": str(retries)})
    kinds = [FaultKind.NODE_NOT_READY, FaultKind.POD_FORCE_DELETED, FaultKind.OOM_KILLED]
    faults = [event(kinds[t % 3], POD, float(t)) for t in range(retries)] + [exited(POD, 137, 99.0)]
    decisions, state = run(training_job, faults)
    assert [d.action for d in decisions] == [Remedy.RESTART] * retries + [Remedy.FAIL_JOB]
    assert all((d.rule, d.scope) == ("jobRetry", RestartScope.ALL) for d in decisions[:-1])
    assert decisions[0].pods == (PodRef("launcher", 0), PodRef("worker", 0), POD)
    assert decisions[-1].limit == "jobRetryNum"
    assert state.job_retries == retries
    assert outcome(training_job, state).result is Outcome.FAILED


def test_job_retry_leaves_code_errors_to_the_roles(tmp_path: Path) -> None:
    training_job = modelarts(tmp_path, {"fault-tolerance/job-retry-num": "3"})
    decisions, _ = run(training_job, [exited(POD, 1)])
    assert (decisions[0].action, decisions[0].rule) == (Remedy.FAIL_JOB, "restartPolicy")


def test_evictions_do_not_spend_job_retries(tmp_path: Path) -> None:
    training_job = modelarts(tmp_path, {"fault-tolerance/job-retry-num": "1"})
    decisions, state = run(training_job, [event(FaultKind.POD_EVICTED, POD, float(t)) for t in range(3)])
    assert [(d.action, d.counted) for d in decisions] == [(Remedy.RESTART, False)] * 3
    assert state.job_retries == 0


def test_unconditional_retry_at_most_three_in_a_row(tmp_path: Path) -> None:
    training_job = modelarts(tmp_path, {"fault-tolerance/job-unconditional-retry": "true"})
    decisions, state = run(training_job, [exited(POD, 1, float(t)) for t in range(4)])
    assert [d.action for d in decisions] == [Remedy.RESTART] * 3 + [Remedy.FAIL_JOB]
    assert all(d.rule == "jobUnconditionalRetry" for d in decisions)
    assert decisions[-1].limit == "jobUnconditionalRetry"
    # Healthy running between failures starts the count again.
    decisions, state = run(training_job, [exited(POD, 1, float(t)) for t in range(3)])
    state = record_running(state, POD, 10.0)
    decisions, _ = run(training_job, [exited(POD, 1, 10.0 + 600.0)], state)
    assert decisions[0].action is Remedy.RESTART


def test_hang_retry_three_restarts_in_place_then_failure(tmp_path: Path) -> None:
    training_job = modelarts(tmp_path, {"fault-tolerance/hang-retry": "true"})
    decisions, state = run(training_job, [event(FaultKind.HANG, POD, float(t)) for t in range(4)])
    assert [d.action for d in decisions] == [Remedy.RESTART_IN_PLACE] * 3 + [Remedy.FAIL_JOB]
    assert not any(d.counted for d in decisions)
    assert "reason Hang" in decisions[-1].reason
    assert outcome(training_job, state).result is Outcome.FAILED
