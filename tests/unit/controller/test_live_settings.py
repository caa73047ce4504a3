"""A live job's settings, decided once by the engine (``trainguard.controller.torchrun_command``): its one
timeout (the hang detection's, bounding its collectives too) handed to its workers; a timeout too short to tell
a fault from a slow step refused with the field and the fix; NCCL's error handling set by a container to a mode
that ends the survivors of a fault turns live mode off for the job, said once in a ``LiveModeOff`` Warning."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.controller.harness import Harness
from trainguard.api import TrainingJob
from trainguard.controller import EmitEvent, JobStatus
from trainguard.controller.launchspec import check_runnable
from trainguard.controller.torchrun_command import (
    LaunchError,
    is_live,
    live_refusal,
    live_timeout,
    torchrun_env,
)
from trainguard.pod import contract


def _live(env: list[dict[str, str]] | None = None, hang: dict[str, Any] | None = None) -> TrainingJob:
    container = {"name": "main", "image": "pytorch", "command": ["torchrun", "train.py"], "env": env or []}
    spec: dict[str, Any] = {
        "frameworkType": "pytorch",
        "replicaSpecs": {
            "worker": {
                "replicas": 2,
                "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [container]}},
            }
        },
        **({"hang": hang} if hang is not None else {}),
    }
    return TrainingJob.model_validate(
        {
            "metadata": {
                "name": "job",
                "namespace": "default",
                "uid": "u",
                "annotations": {"trainguard.io/live": "true"},
            },
            "spec": spec,
        }
    )


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        ({}, False),
        ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}, False),  # clean up only: what live mode sets
        ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}, False),
        ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, True),  # tear down: torch's default when unset
        ({"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}, True),
        ({"NCCL_ASYNC_ERROR_HANDLING": "1"}, True),  # its older name
    ],
)
def test_an_nccl_error_handling_that_ends_survivors_is_refused_with_the_fix(
    env: dict[str, str], refused: bool
) -> None:
    why = contract.nccl_refusal(env)
    assert (why is not None) == refused
    job = _live([{"name": k, "value": v} for k, v in env.items()])
    assert is_live(job) is not refused
    if refused:
        assert why is not None
        assert "set 2" in why
        assert live_refusal(job) == f"replicaSpecs.worker container main: {why}"


def test_a_live_jobs_one_timeout_is_its_hang_detections_and_its_workers_are_told() -> None:
    assert live_timeout(_live()) == 1800  # no hang block: that block's default, never a slow step's length
    job = _live(hang={"timeoutSeconds": 120})
    assert live_timeout(job) == 120
    assert torchrun_env(job, "rdzv:29400")[contract.ENV_LIVE_TIMEOUT] == "120"
    check_runnable(job)


def test_a_timeout_too_short_for_a_step_is_refused_naming_the_field_and_the_fix() -> None:
    with pytest.raises(LaunchError) as refused:
        check_runnable(_live(hang={"timeoutSeconds": 5}))
    assert str(refused.value).startswith("spec.hang.timeoutSeconds: 5 s is too short for live mode")
    assert "give at least 10" in str(refused.value)


def test_live_mode_turned_off_is_said_once_with_the_reason() -> None:
    h = Harness.start(_live([{"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": "1"}]))
    h.running()
    for _ in range(3):
        h.tick()
    h.status = JobStatus.from_dict(h.status.to_dict())  # a controller that restarted remembers it
    h.tick()
    warnings = [
        action
        for result in h.results
        for action in result.actions
        if isinstance(action, EmitEvent) and action.reason == "LiveModeOff"
    ]
    assert len(warnings) == 1
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" in warnings[0].message
    assert "torchrun's elastic agent" in warnings[0].message
