"""The pods' wiring for the controller's nudges on Kubernetes: the agent's ``--nudge-file`` on a downwardAPI
projection of the pod's nudge annotation. Pure: no cluster (tests/k8s/test_operator_pytorch.py checks the
annotations on a real one; tests/unit/controller/test_nudges.py the decision)."""

from __future__ import annotations

from tests.k8s.launches import launch, pod_file
from trainguard.api import TrainingJob
from trainguard.api.load import load_object
from trainguard.backends.k8s import manifests
from trainguard.backends.k8s.kinds import NATIVE


def _job() -> TrainingJob:
    obj = {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "el", "namespace": "team-a", "uid": "u-1"},
        "spec": {
            "frameworkType": "pytorch",
            "replicaSpecs": {
                "worker": {
                    "replicas": 3,
                    "template": {
                        "spec": {
                            "containers": [{"name": "m", "image": "i", "command": ["python", "train.py"]}]
                        }
                    },
                },
                "sidecar": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "m", "image": "i", "command": ["sleep"]}]}},
                },
            },
        },
    }
    return load_object(obj, "test").job


TORCH = _job()


def test_torchrun_pods_read_their_nudge_annotation_through_a_downward_api_file() -> None:
    pod = manifests.pod(NATIVE, TORCH, launch(TORCH, "worker", 0, {"worker": 3}), manifests.PodSettings())
    container = pod["spec"]["containers"][0]
    command = container["command"]
    assert command[command.index("--nudge-file") + 1] == manifests.NUDGE_FILE
    assert command.index("--nudge-file") < command.index("--")
    item = pod_file(pod, manifests.NUDGE_FILE)
    assert item is not None
    assert item["fieldRef"]["fieldPath"] == f"metadata.annotations['{manifests.ANNOTATION_NUDGE}']"

    plain = launch(TORCH, "sidecar", 0, {"worker": 3, "sidecar": 1})
    sidecar = manifests.pod(NATIVE, TORCH, plain, manifests.PodSettings())
    assert pod_file(sidecar, manifests.NUDGE_FILE) is None
    assert "--nudge-file" not in sidecar["spec"]["containers"][0]["command"]
