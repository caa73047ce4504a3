"""The job model: the native TrainingJob, its dialects, validation and the CRD."""

from trainguard.api.errors import SpecError, SpecProblem
from trainguard.api.exitcodes import DEFAULT_RETRYABLE, MAX_EXIT_CODE, ExitCodeSet
from trainguard.api.model import (
    API_VERSION,
    KIND,
    BackoffPolicy,
    CleanPodPolicy,
    ElasticPolicy,
    EndPolicy,
    ExceptionalEvent,
    FaultTolerantRule,
    FrameworkType,
    HangPolicy,
    JobRetryPolicy,
    ObjectMeta,
    ReplicaSpec,
    RestartPolicy,
    RestartScope,
    TrainingJob,
    TrainingJobSpec,
    pod_name,
)
from trainguard.pod.hangsignal import HangSignal

__all__ = [
    "API_VERSION",
    "DEFAULT_RETRYABLE",
    "KIND",
    "MAX_EXIT_CODE",
    "BackoffPolicy",
    "CleanPodPolicy",
    "ElasticPolicy",
    "EndPolicy",
    "ExceptionalEvent",
    "ExitCodeSet",
    "FaultTolerantRule",
    "FrameworkType",
    "HangPolicy",
    "HangSignal",
    "JobRetryPolicy",
    "ObjectMeta",
    "ReplicaSpec",
    "RestartPolicy",
    "RestartScope",
    "SpecError",
    "SpecProblem",
    "TrainingJob",
    "TrainingJobSpec",
    "pod_name",
]
