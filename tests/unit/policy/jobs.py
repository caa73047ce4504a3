"""Building jobs for the policy tests: native TrainingJobs from a few keyword arguments, and CCE's
AITrainingJob example."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainguard.api import TrainingJob
from trainguard.api.load import load_jobs
from trainguard.policy import (
    Decision,
    Fault,
    FaultKind,
    PodRef,
    PolicyState,
    apply_decision,
    decide,
    resolve_role,
)

#: The repository keeps CCE's AITrainingJob example unchanged among its examples.
REPO = Path(__file__).resolve().parents[3]
CCE_JOB = REPO / "examples" / "jobs" / "cce-horovod-elastic.yaml"


def role(replicas: int = 1, **fields: Any) -> dict[str, Any]:
    """A role as the YAML writes it (camelCase fields), e.g. role(3, restartPolicy="ExitCode")."""
    template = {"spec": {"containers": [{"name": "main", "command": ["true"]}]}}
    return {"replicas": replicas, "template": template, **fields}


def job(
    roles: dict[str, dict[str, Any]] | None = None, annotations: dict[str, str] | None = None, **spec: Any
) -> TrainingJob:
    """A native job; ``roles`` defaults to one role "worker" with one pod and restartPolicy OnFailure."""
    return TrainingJob.model_validate(
        {
            "apiVersion": "trainguard.io/v1",
            "kind": "TrainingJob",
            "metadata": {"name": "job", "annotations": annotations or {}},
            "spec": {"replicaSpecs": roles or {"worker": role()}, **spec},
        }
    )


def cce_job() -> TrainingJob:
    """CCE's AITrainingJob example, read by the loader unchanged."""
    (loaded,) = load_jobs(CCE_JOB)
    assert loaded.dialect == "AITrainingJob"
    return loaded.job


def exited(pod: PodRef, code: int, at: float = 0.0) -> Fault:
    return Fault(FaultKind.EXITED, pod, at, exit_code=code)


def event(kind: FaultKind, pod: PodRef, at: float = 0.0) -> Fault:
    code = 137 if kind is FaultKind.OOM_KILLED else None
    return Fault(kind, pod, at, exit_code=code)


def alive_except(training_job: TrainingJob, faulted: PodRef) -> dict[str, int]:
    """Every pod alive except the faulted one."""
    alive = {name: spec.replicas for name, spec in training_job.spec.replica_specs.items()}
    alive[resolve_role(training_job, faulted.role)[0]] -= 1
    return alive


def first_decision(training_job: TrainingJob, fault: Fault, state: PolicyState | None = None) -> Decision:
    assert fault.pod is not None
    return decide(
        training_job, state or PolicyState(), fault, fault.at, alive_except(training_job, fault.pod)
    )


def run(
    training_job: TrainingJob, faults: list[Fault], state: PolicyState | None = None
) -> tuple[list[Decision], PolicyState]:
    """Decide each fault at its own time and carry the decision out; every other pod stays healthy."""

    state = state or PolicyState()
    decisions: list[Decision] = []
    for fault in faults:
        assert fault.pod is not None
        decision = decide(training_job, state, fault, fault.at, alive_except(training_job, fault.pod))
        decisions.append(decision)
        state = apply_decision(state, decision, fault.at)
    return decisions, state
