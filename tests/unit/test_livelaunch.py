"""``trainguard.pod.torchrun --live``'s pure parts: each worker's environment and the job's prefix in the store."""

from __future__ import annotations

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
