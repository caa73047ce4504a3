"""Kubeflow's ``PyTorchJob`` (``kubeflow.org/v1``), read with Kubeflow's defaults and meanings.

- ``pytorchReplicaSpecs`` ``Master``/``Worker`` (any letter case) become roles ``master``/``worker``;
  ``replicas`` defaults to 1, a Master has exactly one, and the container named ``pytorch`` (required, as
  in Kubeflow) is moved first, where trainguard looks for the training command.
- ``restartPolicy`` (default ``OnFailure``): ``Always``, ``OnFailure`` and ``Never`` keep their names;
  ``ExitCode`` becomes ``OnNodeFailWithExitCode``: exit codes 128-255 (killed by a signal) are retried,
  1-127 are permanent, and a pod lost with its node, deleted or evicted is replaced, as Kubeflow recreates
  pods that disappear.
- Success as in Kubeflow's controller: with a Master the job succeeds when the Master succeeds (workers'
  completion does not count); without one, when every Worker succeeded, or, for an elastic job, when any
  Worker succeeded. Any pod that fails for good fails the job.
- ``runPolicy``: ``backoffLimit``, ``activeDeadlineSeconds`` (timeLimit), ``cleanPodPolicy`` (default
  ``None``), ``ttlSecondsAfterFinished``, ``suspend``, and ``schedulingPolicy`` (``minAvailable``, ``queue``,
  ``priorityClass``, ``minResources``, ``scheduleTimeoutSeconds``: the native ``schedulingPolicy``, what a gang
  scheduler is told when the pods name one).
- ``elasticPolicy``: ``minReplicas``/``maxReplicas`` bound the Worker role (one missing takes the other's
  value, both missing take the Worker's replicas); ``maxRestarts``, ``rdzv*``, ``metrics`` and the
  processes per node (``spec.nprocPerNode``, or the deprecated ``elasticPolicy.nProcPerNode``) go to
  ``spec.elastic``, the settings torchrun is started with.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from trainguard.api.dialects.base import Conversion, Dialect, validate_strictly
from trainguard.api.documents import Document
from trainguard.api.errors import SpecError, SpecProblem
from trainguard.api.fieldpath import FieldPath
from trainguard.api.model import API_VERSION, CleanPodPolicy, EndPolicy, FrameworkType, RestartPolicy
from trainguard.api.model import KIND as NATIVE_KIND

KIND = "PyTorchJob"
API_VERSIONS = ("kubeflow.org/v1",)
#: Kubeflow runs the container with this name; the others are sidecars.
CONTAINER_NAME = "pytorch"
MASTER, WORKER = "Master", "Worker"


class KubeflowRestartPolicy(str, Enum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    EXIT_CODE = "ExitCode"


class RdzvBackend(str, Enum):
    C10D = "c10d"
    ETCD = "etcd"
    ETCD_V2 = "etcd-v2"


RESTART_POLICIES = {
    KubeflowRestartPolicy.ALWAYS: RestartPolicy.ALWAYS,
    KubeflowRestartPolicy.ON_FAILURE: RestartPolicy.ON_FAILURE,
    KubeflowRestartPolicy.NEVER: RestartPolicy.NEVER,
    KubeflowRestartPolicy.EXIT_CODE: RestartPolicy.ON_NODE_FAIL_WITH_EXIT_CODE,
}


class _Kubeflow(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, frozen=True, extra="forbid")


class KubeflowReplicaSpec(_Kubeflow):
    replicas: int | None = Field(default=None, ge=0)
    restart_policy: KubeflowRestartPolicy = KubeflowRestartPolicy.ON_FAILURE
    template: dict[str, Any] = Field(default_factory=dict)


class RdzvConf(_Kubeflow):
    key: str
    value: str


class KubeflowElasticPolicy(_Kubeflow):
    min_replicas: int | None = Field(default=None, ge=1)
    max_replicas: int | None = Field(default=None, ge=1)
    rdzv_backend: RdzvBackend | None = None
    rdzv_port: int | None = Field(default=None, ge=1, le=65535)
    rdzv_host: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: tuple[RdzvConf, ...] = ()
    standalone: bool | None = None
    n_proc_per_node: int | None = Field(default=None, ge=1)
    max_restarts: int | None = Field(default=None, ge=0)
    metrics: tuple[dict[str, Any], ...] = ()


class RunPolicy(_Kubeflow):
    clean_pod_policy: CleanPodPolicy = CleanPodPolicy.NONE
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    active_deadline_seconds: int | None = Field(default=None, ge=1)
    backoff_limit: int | None = Field(default=None, ge=0)
    scheduling_policy: dict[str, Any] | None = None
    suspend: bool = False
    managed_by: str | None = None


class PyTorchJobSpec(_Kubeflow):
    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    elastic_policy: KubeflowElasticPolicy | None = None
    nproc_per_node: str | int | None = None
    pytorch_replica_specs: dict[str, KubeflowReplicaSpec]


class PyTorchJob(_Kubeflow):
    api_version: str
    kind: str
    metadata: dict[str, Any]
    spec: PyTorchJobSpec
    status: dict[str, Any] | None = None


_SPECS: FieldPath = ("spec", "pytorchReplicaSpecs")
_RUN_POLICY_FIELDS = ("backoffLimit", "ttlSecondsAfterFinished", "cleanPodPolicy", "suspend")


def convert(document: Document) -> Conversion:
    job = validate_strictly(PyTorchJob, document.data, document)
    spec = job.spec
    keys = _replica_keys(document, spec)
    elastic = spec.elastic_policy
    warnings = _warnings(document, spec)
    _check(document, spec, keys)
    roles: dict[str, dict[str, Any]] = {}
    if MASTER in keys:
        roles["master"] = _role(spec.pytorch_replica_specs[keys[MASTER]], "master", EndPolicy.ALL)
    if WORKER in keys:
        worker = spec.pytorch_replica_specs[keys[WORKER]]
        complete = EndPolicy.NONE if MASTER in keys else EndPolicy.ANY if elastic else EndPolicy.ALL
        roles["worker"] = _role(worker, "worker", complete)
        if elastic is not None:
            replicas = worker.replicas if worker.replicas is not None else 1
            low = elastic.min_replicas or elastic.max_replicas or replicas
            roles["worker"]["minReplicas"] = low
            roles["worker"]["maxReplicas"] = elastic.max_replicas or elastic.min_replicas or replicas
    run = spec.run_policy
    native_spec: dict[str, Any] = {
        "replicaSpecs": roles,
        "frameworkType": FrameworkType.PYTORCH.value,
        "completePolicy": EndPolicy.ANY.value,
        "failPolicy": EndPolicy.ANY.value,
        "cleanPodPolicy": run.clean_pod_policy.value,
        "timeLimit": run.active_deadline_seconds,
        "ttlSecondsAfterFinished": run.ttl_seconds_after_finished,
        "backoffLimit": run.backoff_limit,
        "suspend": run.suspend,
        "elastic": _torchrun(spec),
        "schedulingPolicy": _scheduling(run.scheduling_policy),
    }
    data = {
        "apiVersion": API_VERSION,
        "kind": NATIVE_KIND,
        "metadata": job.metadata,
        "spec": {key: value for key, value in native_spec.items() if value is not None},
    }
    nproc_path: FieldPath = (
        ("spec", "nprocPerNode")
        if spec.nproc_per_node is not None
        else ("spec", "elasticPolicy", "nProcPerNode")
    )

    def source_path(path: FieldPath) -> FieldPath:
        return _source_path(path, keys, elastic is not None, nproc_path)

    return Conversion(data, tuple(warnings), source_path)


def _scheduling(policy: dict[str, Any] | None) -> dict[str, Any] | None:
    """Kubeflow's schedulingPolicy for the gang scheduler (the native field has the same names); unknown fields
    are refused by the native model with their path."""
    if not policy:
        return None
    converted = dict(policy)
    resources = converted.get("minResources")
    if isinstance(resources, dict):  # quantities may be written as numbers (cpu: 4)
        converted["minResources"] = {str(name): str(value) for name, value in resources.items()}
    return converted


def _replica_keys(document: Document, spec: PyTorchJobSpec) -> dict[str, str]:
    """Kubeflow's replica type (Master/Worker) -> the key the user wrote, matched in any letter case."""
    keys: dict[str, str] = {}
    problems: list[SpecProblem] = []
    for written in spec.pytorch_replica_specs:
        canonical = next((name for name in (MASTER, WORKER) if name.lower() == written.lower()), None)
        if canonical is None:
            problems.append(
                document.problem(
                    (*_SPECS, written), f'replica type "{written}" is not one of {MASTER}, {WORKER}'
                )
            )
        elif canonical in keys:
            problems.append(
                document.problem(
                    (*_SPECS, written), f'"{written}" and "{keys[canonical]}" are the same replica type'
                )
            )
        else:
            keys[canonical] = written
    if not spec.pytorch_replica_specs:
        problems.append(document.problem(_SPECS, f"pytorchReplicaSpecs needs a {MASTER} or a {WORKER}"))
    if problems:
        raise SpecError(problems)
    return keys


def _check(document: Document, spec: PyTorchJobSpec, keys: dict[str, str]) -> None:
    """Kubeflow's own validation (its admission webhook), with its messages made specific."""
    problems: list[SpecProblem] = []
    if MASTER in keys:
        replicas = spec.pytorch_replica_specs[keys[MASTER]].replicas
        if replicas not in (None, 1):
            problems.append(
                document.problem(
                    (*_SPECS, keys[MASTER], "replicas"),
                    f"replicas {replicas}: a PyTorchJob has exactly one Master",
                )
            )
    if spec.elastic_policy is not None:
        if WORKER not in keys:
            problems.append(
                document.problem(
                    ("spec", "elasticPolicy"),
                    "elasticPolicy needs a Worker in pytorchReplicaSpecs: the Worker role grows and shrinks",
                )
            )
        elif spec.pytorch_replica_specs[keys[WORKER]].replicas == 0:
            problems.append(
                document.problem(
                    (*_SPECS, keys[WORKER], "replicas"), "replicas 0: an elastic job needs at least 1 Worker"
                )
            )
        if spec.elastic_policy.n_proc_per_node is not None and spec.nproc_per_node is not None:
            problems.append(
                document.problem(
                    ("spec", "elasticPolicy", "nProcPerNode"),
                    "nProcPerNode must not be used with spec.nprocPerNode (it is the deprecated spelling): "
                    "keep spec.nprocPerNode",
                )
            )
    nproc = spec.nproc_per_node
    if nproc is not None and not _valid_nproc(nproc):
        problems.append(
            document.problem(
                ("spec", "nprocPerNode"),
                f'nprocPerNode "{nproc}" is not auto, cpu, gpu or a number of processes (1 or more)',
            )
        )
    for canonical, written in keys.items():
        problems.extend(_check_template(document, canonical, written, spec.pytorch_replica_specs[written]))
    if problems:
        raise SpecError(problems)


def _check_template(
    document: Document, canonical: str, written: str, replica: KubeflowReplicaSpec
) -> list[SpecProblem]:
    path = (*_SPECS, written, "template", "spec", "containers")
    pod = replica.template.get("spec")
    containers = pod.get("containers") if isinstance(pod, dict) else None
    if not isinstance(containers, list) or not containers:
        return [
            document.problem(path, f"containers is required: the {canonical} needs a container named pytorch")
        ]
    if not any(isinstance(c, dict) and c.get("name") == CONTAINER_NAME for c in containers):
        return [
            document.problem(
                path,
                f'containers: none is named "{CONTAINER_NAME}"; Kubeflow runs the container called '
                f"{CONTAINER_NAME}, so give the training container that name",
            )
        ]
    return []


def _valid_nproc(value: str | int) -> bool:
    if isinstance(value, int):
        return value >= 1
    return value in ("auto", "cpu", "gpu") or (re.fullmatch(r"[0-9]+", value) is not None and int(value) >= 1)


def _warnings(document: Document, spec: PyTorchJobSpec) -> list[SpecProblem]:
    warnings = []
    if spec.run_policy.managed_by is not None:
        warnings.append(
            document.problem(
                ("spec", "runPolicy", "managedBy"), "managedBy is not used: trainguard runs this job"
            )
        )
    if spec.elastic_policy is not None and spec.elastic_policy.n_proc_per_node is not None:
        warnings.append(
            document.problem(
                ("spec", "elasticPolicy", "nProcPerNode"),
                "nProcPerNode is deprecated in Kubeflow; write spec.nprocPerNode instead",
            )
        )
    return warnings


def _role(replica: KubeflowReplicaSpec, name: str, complete: EndPolicy) -> dict[str, Any]:
    return {
        "replicaType": name,
        "replicas": replica.replicas if replica.replicas is not None else 1,
        "restartPolicy": RESTART_POLICIES[replica.restart_policy].value,
        "completePolicy": complete.value,
        "failPolicy": EndPolicy.ANY.value,
        "template": _pytorch_container_first(replica.template),
    }


def _pytorch_container_first(template: dict[str, Any]) -> dict[str, Any]:
    pod = template.get("spec")
    if not isinstance(pod, dict) or not isinstance(pod.get("containers"), list):
        return template
    containers = pod["containers"]
    ordered = sorted(containers, key=lambda c: not (isinstance(c, dict) and c.get("name") == CONTAINER_NAME))
    return {**template, "spec": {**pod, "containers": ordered}}


def _torchrun(spec: PyTorchJobSpec) -> dict[str, Any] | None:
    elastic = spec.elastic_policy
    nproc = spec.nproc_per_node
    if nproc is None and elastic is not None:
        nproc = elastic.n_proc_per_node
    if isinstance(nproc, str) and nproc.isdigit():
        nproc = int(nproc)
    if elastic is None:
        return None if nproc is None else {"nProcPerNode": nproc}
    settings = {
        "rdzvBackend": elastic.rdzv_backend.value if elastic.rdzv_backend else None,
        "rdzvHost": elastic.rdzv_host,
        "rdzvPort": elastic.rdzv_port,
        "rdzvId": elastic.rdzv_id,
        "rdzvConf": {conf.key: conf.value for conf in elastic.rdzv_conf} or None,
        "standalone": elastic.standalone,
        "nProcPerNode": nproc,
        "maxRestarts": elastic.max_restarts,
        "metrics": list(elastic.metrics) or None,
    }
    return {key: value for key, value in settings.items() if value is not None}


def _source_path(path: FieldPath, keys: dict[str, str], elastic: bool, nproc_path: FieldPath) -> FieldPath:
    """Where a value of the native form came from in the PyTorchJob, for error messages."""
    if len(path) >= 3 and path[:2] == ("spec", "replicaSpecs"):
        written = keys.get(str(path[2]).capitalize(), str(path[2]))
        if elastic and path[3:4] in (("minReplicas",), ("maxReplicas",)):
            return ("spec", "elasticPolicy", *path[3:])
        return (*_SPECS, written, *path[3:])
    if path[:2] == ("spec", "timeLimit"):
        return ("spec", "runPolicy", "activeDeadlineSeconds", *path[2:])
    if len(path) >= 2 and path[0] == "spec" and path[1] in _RUN_POLICY_FIELDS:
        return ("spec", "runPolicy", *path[1:])
    if path[:2] == ("spec", "schedulingPolicy"):
        return ("spec", "runPolicy", *path[1:])
    if path[:3] == ("spec", "elastic", "nProcPerNode"):
        return nproc_path
    if path[:2] == ("spec", "elastic"):
        return ("spec", "elasticPolicy", *path[2:])
    return path


DIALECT = Dialect(name=KIND, api_versions=API_VERSIONS, kind=KIND, convert=convert)
