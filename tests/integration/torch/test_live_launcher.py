"""``python -m trainguard.torchrun --live``, the live launcher, with real workers that use ``trainguard.Live`` on
a real store: its workers are forked from a fork server that imported torch once (warm), a killed worker is
started again alone from that server and rejoins while the other keeps its process, and each worker runs its
script as ``python -u`` would (``__main__``, its arguments, its environment, its ``atexit`` handlers). With
``--cold`` each worker is a fresh interpreter, the launcher's own child."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from trainguard import workerevents  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: A fresh interpreter's import of torch on two busy cores takes up to ~10 s; a round forms in well under one.
START = 120

WORKER = """
import atexit, json, os, sys, time
preloaded = "torch" in sys.modules
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
import trainguard
from trainguard.agent import proc

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
live = trainguard.Live({"model": model, "optimizer": optimizer})
out = os.environ["TEST_OUT"]
atexit.register(lambda: open(os.path.join(out, "atexit-%d" % os.getpid()), "w").close())
parent = proc.stat(os.getpid()).ppid

def train(live):
    ddp = DDP(model)
    for step in live.steps(int(os.environ["TEST_STEPS"])):
        ddp(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        sys.stdout.write(json.dumps({
            "step": step, "world": live.world_size, "pid": os.getpid(), "local_rank": os.environ["LOCAL_RANK"],
            "preloaded": preloaded, "name": __name__, "argv": sys.argv[1:], "parent": parent,
            "parent_name": proc.name(parent), "parent_cmdline": proc.cmdline(parent),
        }) + "\\n")  # one write (the two workers share the pipe), no flush: unbuffered, as with python -u
        time.sleep(float(os.environ["TEST_STEP_DELAY"]))

live.run(train)
"""


@contextmanager
def launched(tmp_path: Path, steps: int, *flags: str) -> Iterator[tuple[subprocess.Popen[str], Any]]:
    """The launcher with 2 workers on a store of this test's; yields it and a queue of its workers' lines."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    command = [sys.executable, "-m", "trainguard.torchrun", "--live", *flags, "--nproc-per-node", "2",
               "--nnodes", "1", "--max-restarts", "3", "--rdzv-endpoint", f"127.0.0.1:{store.port}",
               "--rdzv-id", "launcher-test", str(script), "first", "second"]  # fmt: skip
    env = {**os.environ, "TEST_OUT": str(tmp_path), "TEST_STEPS": str(steps), "TEST_STEP_DELAY": "0.05",
           "TRAINGUARD_LIVE_SIZE": "2", "OMP_NUM_THREADS": "1"}  # fmt: skip
    launcher = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[dict[str, Any]] = queue.Queue()
    errors: list[str] = []

    def read() -> None:
        assert launcher.stdout is not None
        for line in launcher.stdout:
            if line.startswith("{"):
                try:
                    lines.put(json.loads(line))
                except ValueError:  # not a worker's line: the condition waited on fails with the rest
                    errors.append(f"(stdout) {line}")

    def read_errors() -> None:
        assert launcher.stderr is not None
        errors.extend(launcher.stderr)

    readers = [threading.Thread(target=read, daemon=True), threading.Thread(target=read_errors, daemon=True)]
    for reader in readers:
        reader.start()
    try:
        yield launcher, (lines, errors)
    finally:
        if launcher.poll() is None:
            launcher.kill()
        launcher.wait()
        for reader in readers:
            reader.join(timeout=10)
        for pipe in (launcher.stdout, launcher.stderr):
            if pipe is not None:
                pipe.close()


def until(what: str, lines: Any, condition: Any, timeout: float) -> list[dict[str, Any]]:
    """The workers' lines up to the first that meets ``condition``; fails after ``timeout`` s with the
    launcher's stderr."""
    found, errors = [], lines[1]
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines[0].get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            said = "".join(errors)
            pytest.fail(
                f"{what}: not within {timeout:.0f} s; the launcher said: {said[:2000]} ... {said[-2000:]}"
            )
        found.append(line)
        if condition(line):
            return found


def test_workers_are_forked_warm_and_a_killed_one_is_forked_again_alone(tmp_path: Path) -> None:
    with launched(tmp_path, 400) as (launcher, lines):
        seen: dict[str, dict[str, Any]] = {}
        until("both workers training in a world of 2", lines,
              lambda line: seen.setdefault(line["local_rank"], line) and len(seen) == 2 and line["world"] == 2,
              START)  # fmt: skip
        for line in seen.values():
            assert line["preloaded"], line  # torch was there before the script imported it
            assert (line["name"], line["argv"]) == ("__main__", ["first", "second"]), line
            assert line["parent_name"] == workerevents.FORK_SERVER_NAME, line
            # The fork server is the launcher's fork: the launcher's command line.
            assert line["parent_cmdline"][1:4] == ["-m", "trainguard.torchrun", "--live"], line
        server = seen["0"]["parent"]
        assert seen["1"]["parent"] == server
        survivor, victim = seen["0"]["pid"], seen["1"]["pid"]

        os.kill(victim, signal.SIGKILL)
        back = until("local rank 1 again, a new process in a world of 2", lines,
                     lambda line: line["local_rank"] == "1" and line["pid"] != victim and line["world"] == 2,
                     60)[-1]  # fmt: skip
        assert back["parent"] == server, back  # forked again, from the same server
        assert back["preloaded"], back
        assert launcher.poll() is None
        survivor_lines = [line for line in lines[0].queue if line["local_rank"] == "0"]
        assert {line["pid"] for line in survivor_lines} <= {survivor}

        assert launcher.wait(timeout=120) == 0, "".join(lines[1])[-3000:]
    # The script's atexit handlers ran at each worker's end (the killed one had none).
    assert {p.name for p in tmp_path.glob("atexit-*")} == {f"atexit-{survivor}", f"atexit-{back['pid']}"}
    assert not Path(f"/proc/{server}").exists() or _zombie(server), "the fork server outlived the launcher"


def test_with_cold_each_worker_is_a_fresh_interpreter(tmp_path: Path) -> None:
    with launched(tmp_path, 5, "--cold") as (launcher, lines):
        seen: dict[str, dict[str, Any]] = {}
        until("both workers training", lines,
              lambda line: seen.setdefault(line["local_rank"], line) and len(seen) == 2, START)  # fmt: skip
        assert launcher.wait(timeout=120) == 0, "".join(lines[1])[-3000:]
    for line in seen.values():
        assert not line["preloaded"], line
        assert line["parent"] == launcher.pid, line
        assert (line["name"], line["argv"]) == ("__main__", ["first", "second"]), line
    assert len(list(tmp_path.glob("atexit-*"))) == 2


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
