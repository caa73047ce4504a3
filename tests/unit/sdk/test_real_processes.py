"""The Checkpointer in real processes: SIGTERM within the grace period, SIGKILL at random moments of a save."""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainguard.sdk.checkpoint import Checkpointer

torch = pytest.importorskip("torch")

GRACE_SECONDS = 10.0

TRAINER = textwrap.dedent(
    """
    import sys, time
    import torch
    from trainguard import Checkpointer

    checkpointer = Checkpointer(sys.argv[1], keep=2)
    mode = sys.argv[2]
    state = {"w": torch.zeros(2_000_000), "step": 0}  # 8 MB, so that a kill lands inside a write
    if mode == "sigterm":
        checkpointer.save_on_sigterm(lambda: (state, state["step"]))
    print("ready", flush=True)
    while True:
        state["step"] += 1
        state["w"].fill_(state["step"])
        if mode == "save":
            print("saving", state["step"], flush=True)
            checkpointer.save(state, state["step"])
            print("saved", state["step"], flush=True)
        else:
            if state["step"] == 1:
                print("stepped", flush=True)
            time.sleep(0.001)
    """
)


@contextlib.contextmanager
def trainer(tmp_path: Path, directory: Path, mode: str) -> Iterator[subprocess.Popen[str]]:
    """The trainer, started and ready; killed (if still alive) and reaped at the end."""
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    with subprocess.Popen(
        [sys.executable, str(script), str(directory), mode], stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
            yield process
        finally:
            process.kill()


def assert_consistent(checkpointer: Checkpointer) -> int:
    latest = checkpointer.load_latest()
    assert latest is not None
    assert latest.state["step"] == latest.step
    assert torch.equal(latest.state["w"], torch.full((2_000_000,), float(latest.step)))
    return latest.step


@pytest.mark.integration
def test_sigterm_saves_the_latest_state_and_exits_143_within_the_grace_period(tmp_path: Path) -> None:
    with trainer(tmp_path, tmp_path / "ckpt", "sigterm") as process:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "stepped"  # at least one step done: state worth saving
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=GRACE_SECONDS)
        took = time.monotonic() - sent

    assert code == 143
    assert took < GRACE_SECONDS
    assert assert_consistent(Checkpointer(tmp_path / "ckpt")) >= 1


@pytest.mark.integration
def test_a_sigkill_at_any_moment_of_a_save_leaves_the_last_completed_checkpoint(tmp_path: Path) -> None:
    chance = random.Random(20261122)
    for trial in range(5):
        directory = tmp_path / f"ckpt-{trial}"
        kill_at = chance.randint(2, 4)
        confirmed = 0
        with trainer(tmp_path, directory, "save") as process:
            assert process.stdout is not None
            for line in process.stdout:
                word, step = line.split()
                if word == "saved":
                    confirmed = int(step)
                if word == "saving" and int(step) == kill_at:
                    # Somewhere inside this write (torch.save, fsync, rename or pruning) of an 8 MB state.
                    time.sleep(chance.uniform(0, 0.03))
                    process.kill()
                    break

        assert assert_consistent(Checkpointer(directory, keep=2)) >= confirmed
        assert not list(directory.glob("*.corrupt"))
