"""Hot spares' settings (``trainguard.io/live-spares``), decided once by the engine
(``trainguard.controller.torchrun_command.live_spares``): handed to the live launcher of each pod; refused with
the field and the fix when not a small whole number, without live mode, or beyond the devices a pod asks for
(each spare holds a device of its own, as each worker does)."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.api import TrainingJob
from trainguard.controller.launchspec import Network, check_runnable, role_launch
from trainguard.controller.spares import live_spares
from trainguard.controller.torchrun_command import LaunchError
from trainguard.pod import contract


def _job(spares: str | None, *, live: bool = True, gpus: int | None = None, nproc: int = 1) -> TrainingJob:
    container: dict[str, Any] = {"name": "main", "image": "pytorch", "command": ["torchrun", "train.py"]}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    annotations = {"trainguard.io/live": "true"} if live else {}
    if spares is not None:
        annotations["trainguard.io/live-spares"] = spares
    return TrainingJob.model_validate(
        {
            "metadata": {"name": "job", "namespace": "default", "uid": "u", "annotations": annotations},
            "spec": {
                "frameworkType": "pytorch",
                "elastic": {"nProcPerNode": nproc},
                "replicaSpecs": {
                    "worker": {
                        "replicas": 2,
                        "restartPolicy": "OnFailure",
                        "template": {"spec": {"containers": [container]}},
                    }
                },
            },
        }
    )


ACCEPTED = [
    ("none", _job(None), 0, None),
    ("one on CPU", _job("1"), 1, "1"),
    ("zero", _job("0"), 0, None),
    ("two beside two workers on four GPUs", _job("2", gpus=4, nproc=2), 2, "2"),
    ("zero without live mode", _job("0", live=False), 0, None),
]


@pytest.mark.parametrize(("job", "spares", "env"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_spares_a_job_may_have_reach_its_launchers(job: TrainingJob, spares: int, env: str | None) -> None:
    check_runnable(job)
    assert live_spares(job) == spares
    assert dict(role_launch(job, "worker", Network()).torchrun_env).get(contract.ENV_LIVE_SPARES) == env


REFUSED = [
    (
        "not a number",
        _job("many"),
        "'many' is not a number of spare workers per pod; give a whole number from 0 to 8",
    ),
    ("negative", _job("-1"), "give a whole number from 0 to 8"),
    ("over the most", _job("9"), "give a whole number from 0 to 8"),
    ("without live mode", _job("1", live=False), 'add the annotation trainguard.io/live: "true"'),
    (
        "more than the devices left",
        _job("1", gpus=2, nproc=2),
        "1 spare and 2 workers per pod need 3 GPUs, each on a device of its own, and the pods of "
        "replicaSpecs.worker ask for 2 nvidia.com/gpu; ask for 3, or give at most 0 spares",
    ),
]


@pytest.mark.parametrize(("job", "words"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_spares_a_job_cannot_have_are_refused_naming_the_field_and_the_fix(
    job: TrainingJob, words: str
) -> None:
    with pytest.raises(LaunchError) as refused:
        check_runnable(job)
    assert str(refused.value).startswith("metadata.annotations[trainguard.io/live-spares]: ")
    assert words in str(refused.value)
