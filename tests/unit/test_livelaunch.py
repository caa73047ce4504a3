"""``trainguard.pod.torchrun --live``'s pure parts: each worker's environment, the job's prefix in the store, and
which failure says that a script does not use ``trainguard.Live``."""

from __future__ import annotations

import os
import traceback
from pathlib import Path

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


TORCH_MISSING_RANK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 239, in main\n'
    '    dist.init_process_group("gloo")\n'
    "ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable RANK "
    "expected, but not set\n"
)
SCRIPT_MISSING_MASTER = "Traceback (most recent call last):\n  ...\nKeyError: 'MASTER_ADDR'\n"


@pytest.mark.parametrize(
    ("stderr", "missing"),
    [
        (TORCH_MISSING_RANK, "RANK"),
        (SCRIPT_MISSING_MASTER, "MASTER_ADDR"),
        ("ValueError: ... environment variable MASTER_PORT expected, but not set", "MASTER_PORT"),
        ("KeyError: 'LOCAL_RANK'\n", None),  # live mode sets it: not the static world's
        ("torch.OutOfMemoryError: CUDA out of memory\n", None),
        ("live mode: cannot reach the store at 10.0.0.1:29400 (timed out)\n", None),
        ("", None),
    ],
)
def test_the_static_worlds_failure_is_a_missing_variable_of_it(stderr: str, missing: str | None) -> None:
    assert livelaunch.missing_static_world(stderr) == missing


@pytest.mark.parametrize(
    ("restarted", "formed", "latest_round", "stderr", "verdict"),
    [
        # A first start in a job where no round formed, failing for the static world: not using Live.
        (False, False, 0, TORCH_MISSING_RANK, "RANK"),
        (False, False, 0, SCRIPT_MISSING_MASTER, "MASTER_ADDR"),
        # The same failure where the job formed rounds, in a restart, or after a round: a worker's own failure.
        (False, False, 3, TORCH_MISSING_RANK, None),
        (True, False, 0, TORCH_MISSING_RANK, None),
        (False, True, 0, TORCH_MISSING_RANK, None),
        # The store cannot say whether a round formed: not judged (the worker is started again).
        (False, False, None, TORCH_MISSING_RANK, None),
        # A replacement's first start dying before its first round, for any other reason: its own failure.
        (False, False, 0, "torch.OutOfMemoryError: CUDA out of memory\n", None),
        (False, False, 7, "Killed\n", None),
        (False, False, 0, "", None),
    ],
)
def test_only_a_first_start_in_a_job_with_no_round_that_missed_the_static_world_is_without_live(
    restarted: bool, formed: bool, latest_round: int | None, stderr: str, verdict: str | None
) -> None:
    assert livelaunch.without_live(restarted, formed, latest_round, stderr) == verdict


def test_torchs_own_words_for_a_missing_rank_are_recognised(monkeypatch: pytest.MonkeyPatch) -> None:
    rendezvous = pytest.importorskip("torch.distributed.rendezvous")
    from trainguard.pod import contract

    for name in contract.STATIC_WORLD:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="env://") as raised:
        next(rendezvous.rendezvous("env://"))
    text = "".join(traceback.format_exception(raised.value))
    assert livelaunch.missing_static_world(text) == "RANK"


def test_a_first_starts_stderr_is_passed_on_and_its_end_kept(tmp_path: Path) -> None:
    out = (tmp_path / "out").open("wb")
    read, write = os.pipe()
    tail = livelaunch.Tail(os.fdopen(read, "rb"), out)
    body = b"x" * (livelaunch.TAIL_BYTES + 10) + b"\nKeyError: 'RANK'\n"
    os.write(write, body)
    os.close(write)
    assert tail.text(wait=30).endswith("KeyError: 'RANK'\n")
    assert len(tail.text(wait=0).encode()) == livelaunch.TAIL_BYTES
    out.close()
    assert (tmp_path / "out").read_bytes() == body
