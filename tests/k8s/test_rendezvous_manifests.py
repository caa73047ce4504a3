"""What the operator creates for a PyTorch job's rendezvous: the pods' torchrun command and environment, the
store's pod and Service. Pure manifest checks; no cluster needed (tests/k8s/test_operator_pytorch.py runs them
against one)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.k8s.launches import launch
from trainguard.api import TrainingJob
from trainguard.api.load import load_object
from trainguard.backends.k8s import delivery, manifests, metadata, rendezvous, services
from trainguard.backends.k8s.kinds import NATIVE, PYTORCHJOB, JobKind
from trainguard.backends.k8s.observe import is_ours
from trainguard.controller.launchspec import check_runnable

UID = "0b6f7c1e-uid"
Obj = dict[str, Any]


def _pytorchjob(name: str = "elastic", **elastic: Any) -> Obj:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "team-a", "uid": UID},
        "spec": {
            "elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 3, **elastic},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "nodeSelector": {"pool": "gpu"},
                            "tolerations": [{"key": "gpu", "operator": "Exists"}],
                            "imagePullSecrets": [{"name": "registry"}],
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "image": "registry.example/train:1",
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": ["python", "train.py", "--epochs", "3"],
                                    "resources": {"limits": {"nvidia.com/gpu": 8}},
                                    "env": [{"name": "PET_NPROC_PER_NODE", "value": "8"}],
                                }
                            ],
                        }
                    },
                }
            },
        },
    }


def _native(
    framework: str,
    command: list[str],
    annotations: dict[str, str] | None = None,
    name: str = "native",
    role: str = "worker",
) -> Obj:
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": "team-a", "uid": UID, "annotations": annotations or {}},
        "spec": {
            "frameworkType": framework,
            "replicaSpecs": {
                role: {
                    "replicas": 2,
                    "template": {
                        "spec": {"containers": [{"name": "main", "image": "img", "command": command}]}
                    },
                }
            },
        },
    }


def _job(obj: Obj) -> TrainingJob:
    return load_object(obj, "test").job


def _pod(kind: JobKind, job: TrainingJob) -> Obj:
    return manifests.pod(kind, job, launch(job, "worker", 0, {"worker": 2}), manifests.PodSettings())


def _value(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


@pytest.mark.parametrize(
    ("obj", "hosted"),
    [
        (_pytorchjob(), True),
        (_pytorchjob(rdzvHost="etcd.infra", rdzvPort=2379), False),  # the job's own endpoint
        (_pytorchjob(rdzvBackend="etcd-v2"), False),  # no c10d store to host
        (_native("pytorch", ["python", "train.py"]), True),
        (_native("pytorch", ["torchrun", "--nnodes", "2", "train.py"]), True),
        (_native("pytorch", ["python", "train.py"], {"trainguard.io/torchrun": "false"}), False),
        (_native("pytorch", ["/bin/sh", "-c", "sleep 1"]), False),  # no role joins a rendezvous
        (_native("horovod", ["python", "train.py"]), False),
    ],
    ids=["elastic", "own-host", "etcd", "native-python", "native-torchrun", "opted-out", "shell", "horovod"],
)
def test_which_jobs_get_a_rendezvous_store(obj: Obj, hosted: bool) -> None:
    assert rendezvous.hosts_rendezvous(_job(obj)) is hosted


@pytest.mark.parametrize(
    ("name", "service"),
    [
        ("elastic", "elastic-rdzv"),
        ("a" * 58, "a" * 58 + "-rdzv"),  # 63 characters: as is
    ],
)
def test_the_rendezvous_service_is_named_after_the_job(name: str, service: str) -> None:
    job = _job(_native("pytorch", ["python", "train.py"], name=name, role="w"))
    assert services.rendezvous_service_name(job) == service
    assert services.rendezvous_endpoint(job) == f"{service}.team-a.svc:29400"
    assert rendezvous.rendezvous_pod_name(job) == f"{name}-rendezvous"


def test_a_long_job_name_gives_a_valid_and_distinct_service_name() -> None:
    # Pod names (``<job>-w-1``) allow a job name of 59 characters; ``-rdzv`` would make its Service's 64.
    first, second = (
        _job(_native("pytorch", ["python", "t.py"], name="x" * 57 + tail, role="w")) for tail in ("aa", "bb")
    )
    names = [services.rendezvous_service_name(job) for job in (first, second)]
    assert all(len(name) <= 63 and name.endswith("-rdzv") for name in names)
    assert names[0] != names[1]


def test_a_worker_pod_runs_the_agent_around_torchrun_in_the_jobs_rendezvous() -> None:
    job = _job(_pytorchjob())
    container = _pod(PYTORCHJOB, job)["spec"]["containers"][0]
    command = container["command"]
    assert command[:2] == ["/trainguard/bin/trainguard-entry", "run"]
    torchrun = command[command.index("--") + 1 :]
    assert torchrun[:3] == ["python", "-m", "trainguard.pod.torchrun"]
    expected = {
        "--rdzv-backend": "c10d",
        "--rdzv-endpoint": "elastic-rdzv.team-a.svc:29400",
        "--rdzv-id": UID,
        "--nnodes": "1:3",
        "--max-restarts": "100",
    }
    assert {flag: _value(torchrun, flag) for flag in expected} == expected
    assert "is_host=false" in _value(torchrun, "--rdzv-conf").split(",")
    assert torchrun[-3:] == ["train.py", "--epochs", "3"]
    env = [(item["name"], item.get("value")) for item in container["env"]]
    # The command carries every flag: torchrun's defaults in env would only repeat them.
    assert [name for name, _ in env if name.startswith("PET_")] == ["PET_NPROC_PER_NODE"]
    # torchrun's switch is for trainguard's launcher alone: the agent sets it, from its options.
    assert "--env=TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in command[: command.index("--")]
    # The container's own variables come last: Kubernetes takes the last of equal names; the default it
    # gives torchrun is the command's flag, as torchrun would have read it.
    assert [value for name, value in env if name == "PET_NPROC_PER_NODE"][-1] == "8"
    assert _value(torchrun, "--nproc-per-node") == "8"


@pytest.mark.parametrize(
    ("obj", "argv"),
    [
        (_native("horovod", ["python", "train.py"]), ["python", "train.py"]),
        (
            _native("pytorch", ["python", "train.py"], {"trainguard.io/torchrun": "false"}),
            ["python", "train.py"],
        ),
    ],
    ids=["horovod", "opted-out"],
)
def test_other_jobs_keep_their_command_and_get_no_torchrun_environment(obj: Obj, argv: list[str]) -> None:
    container = _pod(NATIVE, _job(obj))["spec"]["containers"][0]
    assert container["command"][container["command"].index("--") + 1 :] == argv
    assert not any(item["name"].startswith("PET_") for item in container["env"])


def test_a_torchrun_command_without_a_script_is_refused_naming_the_field() -> None:
    job = _job(_native("pytorch", ["torchrun", "--nnodes", "2"]))
    with pytest.raises(
        ValueError, match=r"spec\.replicaSpecs\.worker\.template\.spec\.containers\[0\]\.command"
    ):
        check_runnable(job)
    check_runnable(_job(_pytorchjob()))  # a runnable one passes


def test_the_store_pod_runs_the_store_module_in_the_roles_image_and_is_no_replica() -> None:
    job = _job(_pytorchjob())
    store = rendezvous.rendezvous_pod(PYTORCHJOB, job, manifests.PodSettings(scheduler="default-scheduler"))
    meta, spec = store["metadata"], store["spec"]
    assert meta["name"] == "elastic-rendezvous"
    assert meta["ownerReferences"][0]["uid"] == UID
    assert meta["ownerReferences"][0]["kind"] == "PyTorchJob"
    assert meta["labels"][metadata.LABEL_JOB] == "elastic"
    assert meta["labels"][metadata.LABEL_ROLE] == "rendezvous"
    assert metadata.is_rendezvous(store)
    assert not is_ours(store)  # the controller never observes it, so its loss is no fault
    (container,) = spec["containers"]
    assert container["image"] == "registry.example/train:1"
    assert container["imagePullPolicy"] == "IfNotPresent"
    # The store module is delivered like the agent: the image's python3 runs it, the image needs only torch.
    assert container["command"] == [
        delivery.ENTRY,
        "python",
        "-m",
        "trainguard.pod.rendezvous_store",
        "--port",
        "29400",
    ]
    (install,) = spec["initContainers"]
    assert install["image"] == delivery.DEFAULT_AGENT_IMAGE
    assert "limits" not in container["resources"]  # no GPUs
    assert spec["nodeSelector"] == {"pool": "gpu"}
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["restartPolicy"] == "Always"


def test_the_store_service_selects_the_store_pod_and_no_replica() -> None:
    job = _job(_pytorchjob())
    service = rendezvous.rendezvous_service(PYTORCHJOB, job)
    selector = service["spec"]["selector"]
    assert service["metadata"]["name"] == "elastic-rdzv"
    assert service["metadata"]["ownerReferences"][0]["uid"] == UID
    assert "clusterIP" not in service["spec"]  # a ClusterIP Service: one stable address
    assert service["spec"]["ports"][0]["port"] == 29400

    def selected(pod: Obj) -> bool:
        labels = pod["metadata"]["labels"]
        return all(labels.get(key) == value for key, value in selector.items())

    assert selected(rendezvous.rendezvous_pod(PYTORCHJOB, job, manifests.PodSettings()))
    assert not selected(_pod(PYTORCHJOB, job))
    # Not even a replica of a role that happens to be called "rendezvous".
    replica = copy.deepcopy(_pod(PYTORCHJOB, job))
    replica["metadata"]["labels"][metadata.LABEL_ROLE] = "rendezvous"
    assert not selected(replica)
