"""Kubeflow PyTorchJobs convert with Kubeflow's defaults and meanings (see docs/dialects/pytorchjob.md)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.jobdata import DELETE, EXAMPLES, container, edited, error_of, load_one, pytorchjob
from trainguard.api import CleanPodPolicy, EndPolicy, FrameworkType, RestartPolicy, SpecError
from trainguard.api.load import load_jobs

WORKER = "spec.pytorchReplicaSpecs.Worker"


def test_plain_master_and_workers() -> None:
    loaded = load_one(pytorchjob())
    job = loaded.job
    assert loaded.dialect == "PyTorchJob"
    assert list(job.spec.replica_specs) == ["master", "worker"]
    master, worker = job.role("master"), job.role("Worker")
    assert (master.replicas, worker.replicas, worker.is_elastic) == (1, 2, False)
    assert master.restart_policy is worker.restart_policy is RestartPolicy.ON_FAILURE
    assert job.spec.framework_type is FrameworkType.PYTORCH
    assert job.spec.clean_pod_policy is CleanPodPolicy.NONE  # Kubeflow's default for PyTorchJobs
    assert job.spec.elastic is None
    assert job.metadata.namespace == "ml"


def test_with_a_master_the_master_decides_success() -> None:
    job = load_one(pytorchjob()).job
    assert job.spec.complete_policy is EndPolicy.ANY
    assert job.spec.fail_policy is EndPolicy.ANY
    assert job.role("master").complete_policy is EndPolicy.ALL
    assert job.role("worker").complete_policy is EndPolicy.NONE
    assert job.role("master").fail_policy is job.role("worker").fail_policy is EndPolicy.ANY


def test_without_a_master_every_worker_must_succeed() -> None:
    job = load_one(pytorchjob(master=False)).job
    assert list(job.spec.replica_specs) == ["worker"]
    assert job.role("worker").complete_policy is EndPolicy.ALL


def test_elastic_without_a_master_one_finished_worker_is_success() -> None:
    job = load_one(pytorchjob(master=False, elasticPolicy={"minReplicas": 1, "maxReplicas": 4})).job
    assert job.role("worker").complete_policy is EndPolicy.ANY


@pytest.mark.parametrize(
    ("kubeflow", "native"),
    [
        ("Always", RestartPolicy.ALWAYS),
        ("OnFailure", RestartPolicy.ON_FAILURE),
        ("Never", RestartPolicy.NEVER),
        ("ExitCode", RestartPolicy.ON_NODE_FAIL_WITH_EXIT_CODE),
    ],
)
def test_restart_policies_keep_kubeflow_meanings(kubeflow: str, native: RestartPolicy) -> None:
    job = load_one(pytorchjob(restart=kubeflow)).job
    assert job.role("worker").restart_policy is native
    assert job.spec.retryable_exit_codes.ranges == ((128, 255),)  # Kubeflow's retryable codes


def test_defaults_of_a_bare_replica() -> None:
    data = pytorchjob(master=False)
    data["spec"]["pytorchReplicaSpecs"]["Worker"] = {
        "template": {"spec": {"containers": [container("pytorch")]}}
    }
    worker = load_one(data).job.role("worker")
    assert worker.replicas == 1
    assert worker.restart_policy is RestartPolicy.ON_FAILURE


def test_run_policy() -> None:
    run = {
        "backoffLimit": 4,
        "activeDeadlineSeconds": 600,
        "cleanPodPolicy": "All",
        "ttlSecondsAfterFinished": 60,
        "suspend": True,
    }
    spec = load_one(pytorchjob(runPolicy=run)).job.spec
    assert (spec.backoff_limit, spec.time_limit, spec.ttl_seconds_after_finished) == (4, 600, 60)
    assert spec.clean_pod_policy is CleanPodPolicy.ALL
    assert spec.suspend is True


def test_elastic_policy() -> None:
    elastic = {
        "minReplicas": 2,
        "maxReplicas": 6,
        "maxRestarts": 10,
        "rdzvBackend": "c10d",
        "rdzvPort": 29400,
        "rdzvId": "run-1",
        "rdzvConf": [{"key": "join_timeout", "value": "300"}],
        "metrics": [{"type": "Resource", "resource": {"name": "cpu"}}],
    }
    job = load_one(pytorchjob(master=False, workers=3, elasticPolicy=elastic, nprocPerNode="4")).job
    worker = job.role("worker")
    assert (worker.replicas, worker.min_count, worker.max_count, worker.is_elastic) == (3, 2, 6, True)
    settings = job.spec.elastic
    assert settings is not None
    assert (settings.rdzv_backend, settings.rdzv_port, settings.rdzv_id) == ("c10d", 29400, "run-1")
    assert settings.rdzv_conf == {"join_timeout": "300"}
    assert (settings.max_restarts, settings.n_proc_per_node) == (10, 4)
    assert settings.metrics == ({"type": "Resource", "resource": {"name": "cpu"}},)


@pytest.mark.parametrize(
    ("elastic", "workers", "bounds"),
    [
        ({}, 3, (3, 3)),
        ({"minReplicas": 2}, 2, (2, 2)),
        ({"maxReplicas": 5}, 5, (5, 5)),
        ({"minReplicas": 1, "maxReplicas": 5}, 3, (1, 5)),
    ],
)
def test_elastic_bounds_default_as_in_kubeflow(
    elastic: dict[str, int], workers: int, bounds: tuple[int, int]
) -> None:
    worker = load_one(pytorchjob(master=False, workers=workers, elasticPolicy=elastic)).job.role("worker")
    assert (worker.min_count, worker.max_count) == bounds


def test_nproc_per_node_words() -> None:
    job = load_one(pytorchjob(nprocPerNode="gpu")).job
    assert job.spec.elastic is not None
    assert job.spec.elastic.n_proc_per_node == "gpu"


def test_deprecated_nproc_per_node_in_the_elastic_policy_warns() -> None:
    loaded = load_one(pytorchjob(master=False, elasticPolicy={"nProcPerNode": 2}))
    assert loaded.job.spec.elastic is not None
    assert loaded.job.spec.elastic.n_proc_per_node == 2
    (warning,) = loaded.warnings
    assert "spec.elasticPolicy.nProcPerNode: nProcPerNode is deprecated in Kubeflow" in warning


def test_the_scheduling_policy_goes_to_the_gang_scheduler() -> None:
    policy = {
        "minAvailable": 3,
        "queue": "q",
        "priorityClass": "high",
        "minResources": {"cpu": 4, "memory": "8Gi"},
    }
    loaded = load_one(pytorchjob(runPolicy={"schedulingPolicy": policy}))
    scheduling = loaded.job.spec.scheduling_policy
    assert scheduling is not None
    assert (scheduling.min_available, scheduling.queue, scheduling.priority_class) == (3, "q", "high")
    assert scheduling.min_resources == {"cpu": "4", "memory": "8Gi"}
    assert not loaded.warnings


@pytest.mark.parametrize(
    ("policy", "path"),
    [
        ({"minAvailable": 0}, "spec.runPolicy.schedulingPolicy.minAvailable"),
        ({"queue": "q", "gang": True}, "spec.runPolicy.schedulingPolicy.gang"),
    ],
)
def test_a_bad_scheduling_policy_names_its_field(policy: dict[str, object], path: str) -> None:
    with pytest.raises(SpecError) as error:
        load_one(pytorchjob(runPolicy={"schedulingPolicy": policy}))
    assert path in str(error.value)


def test_replica_types_in_any_case() -> None:
    data = pytorchjob()
    specs = data["spec"]["pytorchReplicaSpecs"]
    data["spec"]["pytorchReplicaSpecs"] = {"master": specs["Master"], "WORKER": specs["Worker"]}
    assert list(load_one(data).job.spec.replica_specs) == ["master", "worker"]


def test_the_pytorch_container_comes_first() -> None:
    data = pytorchjob(master=False)
    data["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].insert(
        0, container("sidecar")
    )
    worker = load_one(data).job.role("worker")
    assert [c["name"] for c in worker.template["spec"]["containers"]] == ["pytorch", "sidecar"]
    assert worker.container["name"] == "pytorch"


CASES: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "two masters",
        edited(pytorchjob(), "spec.pytorchReplicaSpecs.Master.replicas", 2),
        "spec.pytorchReplicaSpecs.Master.replicas",
        "replicas 2: a PyTorchJob has exactly one Master",
    ),
    (
        "a replica type Kubeflow does not have",
        edited(pytorchjob(), "spec.pytorchReplicaSpecs.Chief", {"replicas": 1}),
        "spec.pytorchReplicaSpecs.Chief",
        'replica type "Chief" is not one of Master, Worker',
    ),
    (
        "no container named pytorch",
        edited(pytorchjob(), f"{WORKER}.template.spec.containers.0.name", "main"),
        f"{WORKER}.template.spec.containers",
        'containers: none is named "pytorch"',
    ),
    (
        "elastic without workers",
        edited(pytorchjob(elasticPolicy={"maxReplicas": 2}), WORKER, DELETE),
        "spec.elasticPolicy",
        "elasticPolicy needs a Worker in pytorchReplicaSpecs",
    ),
    (
        "both spellings of the processes per node",
        pytorchjob(nprocPerNode="2", elasticPolicy={"nProcPerNode": 2}),
        "spec.elasticPolicy.nProcPerNode",
        "nProcPerNode must not be used with spec.nprocPerNode",
    ),
    (
        "processes per node that are no number",
        pytorchjob(nprocPerNode="many"),
        "spec.nprocPerNode",
        'nprocPerNode "many" is not auto, cpu, gpu or a number of processes',
    ),
    (
        "unknown restartPolicy",
        edited(pytorchjob(), f"{WORKER}.restartPolicy", "OnNodeFail"),
        f"{WORKER}.restartPolicy",
        'restartPolicy "OnNodeFail" is not one of Always, OnFailure, Never, ExitCode',
    ),
    (
        "unknown runPolicy field",
        pytorchjob(runPolicy={"backofLimit": 3}),
        "spec.runPolicy.backofLimit",
        'unknown field "backofLimit" (did you mean backoffLimit?)',
    ),
    (
        "elastic min above max",
        pytorchjob(master=False, workers=3, elasticPolicy={"minReplicas": 4, "maxReplicas": 2}),
        "spec.elasticPolicy.minReplicas",
        "minReplicas 4 > maxReplicas 2",
    ),
    (
        "workers outside the elastic bounds",
        pytorchjob(master=False, workers=7, elasticPolicy={"minReplicas": 1, "maxReplicas": 5}),
        f"{WORKER}.replicas",
        "replicas 7 outside [1, 5]",
    ),
    (
        "a deadline of zero",
        pytorchjob(runPolicy={"activeDeadlineSeconds": 0}),
        "spec.runPolicy.activeDeadlineSeconds",
        "activeDeadlineSeconds 0 must be at least 1",
    ),
    (
        "no replica specs",
        edited(pytorchjob(), "spec.pytorchReplicaSpecs", {}),
        "spec.pytorchReplicaSpecs",
        "needs a Master or a Worker",
    ),
]


@pytest.mark.parametrize(("document", "path", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_pytorchjobs(document: dict[str, Any], path: str, message: str) -> None:
    (problem,) = error_of(document).problems
    assert problem.path == path
    assert message in problem.message


@pytest.mark.parametrize(
    "name", ["pytorchjob-plain.yaml", "pytorchjob-exitcode.yaml", "pytorchjob-elastic.yaml"]
)
def test_examples_load_and_round_trip(name: str) -> None:
    (loaded,) = load_jobs(EXAMPLES / name)
    assert loaded.dialect == "PyTorchJob"
    assert loaded.warnings == ()
    assert load_one(loaded.job.to_dict()).job == loaded.job
