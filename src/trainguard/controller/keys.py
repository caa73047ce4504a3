"""Idempotency keys: the same intent always gets the same key, a new intent always a new one.

A key names the job (its uid, else namespace/name), the pod and the incarnation an action is about, so a
controller that reconciles the same observation twice, or restarts and does it again, sends the same keys.
"""

from __future__ import annotations

from trainguard.api import TrainingJob


def job_key(job: TrainingJob) -> str:
    return job.metadata.uid or f"{job.metadata.namespace}/{job.metadata.name}"


def launch(job: TrainingJob, pod: str, generation: int) -> str:
    return f"{job_key(job)}/{pod}/g{generation}/launch"


def launch_again(job: TrainingJob, pod: str, generation: int, attempt: int) -> str:
    """Launch ``attempt`` (2, 3, ...) of one incarnation, after the previous one had to wait (``NotYet``)."""
    return f"{launch(job, pod, generation)}{attempt}"


def terminate(job: TrainingJob, pod: str, generation: int) -> str:
    return f"{job_key(job)}/{pod}/g{generation}/terminate"


def remove_stuck(job: TrainingJob, pod: str, generation: int) -> str:
    """The forced removal of one incarnation stuck terminating."""
    return f"{job_key(job)}/{pod}/g{generation}/remove-stuck"


def restart_in_place(job: TrainingJob, pod: str, generation: int, attempt: int) -> str:
    return f"{job_key(job)}/{pod}/g{generation}/in-place{attempt}"


def agent_missing(job: TrainingJob, pod: str, generation: int) -> str:
    """The warning that one incarnation of a pod runs without the agent."""
    return f"{job_key(job)}/{pod}/g{generation}/agent-missing"


def discovery(job: TrainingJob, version: int) -> str:
    return f"{job_key(job)}/discovery/v{version}"


def event(job: TrainingJob, seq: int) -> str:
    return f"{job_key(job)}/event/{seq}"


def status(job: TrainingJob, revision: int) -> str:
    return f"{job_key(job)}/status/r{revision}"


def nudge(job: TrainingJob, failed_pod: str, seq: int) -> str:
    """The nudge of the survivors of one failure (history entry ``seq``)."""
    return f"{job_key(job)}/nudge/{failed_pod}#{seq}"


def release(job: TrainingJob, lost_pod: str, seq: int) -> str:
    """The release of the survivors of one loss (history entry ``seq``), or the record that it waits."""
    return f"{job_key(job)}/release/{lost_pod}#{seq}"


def isolate(job: TrainingJob, node: str) -> str:
    """The isolation of ``node`` after this job's check found it faulty (once per job and node)."""
    return f"{job_key(job)}/isolate/{node}"
