"""``trainguard.pod.torchrun --live``'s pure parts: each worker's environment, the job's prefix in the store,
and which failed worker says its script does not use live mode."""

from __future__ import annotations

import pytest

from trainguard.pod import livelaunch


def test_each_worker_gets_its_local_rank_the_first_size_and_the_jobs_store() -> None:
    static = {"RANK": "3", "MASTER_ADDR": "digits-worker-0", "MASTER_PORT": "23456"}
    env = livelaunch.worker_env(
        {"PATH": "/bin", **static}, 1, 2, "10.0.0.1:29400", "uid-7", size=6, minimum=2
    )
    assert env == {
        "PATH": "/bin",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "WORLD_SIZE": "6",
        "TRAINGUARD_LIVE_MINIMUM": "2",
        "TRAINGUARD_LIVE_STORE": "10.0.0.1:29400",
        "TRAINGUARD_LIVE_PREFIX": "trainguard/live/uid-7/",
        "TORCHELASTIC_RUN_ID": "uid-7",
    }


def test_the_prefix_is_the_one_the_sdk_reads_by_default(monkeypatch) -> None:
    from trainguard.pod import contract

    monkeypatch.delenv(contract.ENV_LIVE_PREFIX, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "uid-7")
    assert contract.live_prefix("uid-7") == "trainguard/live/uid-7/"


FAILED_STATIC = (
    "ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable RANK "
    "expected, but not set\n"
)


@pytest.mark.parametrize(
    ("first", "formed", "stderr", "unused"),
    [
        (True, False, FAILED_STATIC, True),  # a script of its own static world: not live
        (False, False, FAILED_STATIC, False),  # a replacement or a restart: a failure like any other
        (True, True, FAILED_STATIC, False),  # it formed a round: it uses live mode
        (True, False, "RuntimeError: CUDA out of memory\n", False),  # failed starting, for another reason
        (True, False, "", False),  # killed before it said anything
    ],
)
def test_only_a_first_worker_that_failed_on_the_static_world_is_taken_for_a_script_without_live(
    first: bool, formed: bool, stderr: str, unused: bool
) -> None:
    assert livelaunch.not_live(first, formed, stderr) is unused
