"""torchrun's agents (``trainguard.pod.torchrun``, as every pod runs them) through the loss of their rendezvous
store: its process killed and started again on its port, empty (its pod created again on Kubernetes). The agents
stay, their workers train on, a third agent that joins afterwards is made room for (the round the agents were in
is put back in the new store), and a worker's crash forms a new round there. With torch's own store client, both
agents end at their next look at the rendezvous (``RendezvousConnectionError``); with the store left empty, the
third waits alone."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

from live_harness import ROUND, SRC, START, StoreProcess, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TRAIN = """
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
print(f"start rank {dist.get_rank()} of {dist.get_world_size()} pid {os.getpid()}", flush=True)
step = 0
while True:
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"step {step} rank {dist.get_rank()}", flush=True)
    step += 1
    time.sleep(0.1)
"""
#: Steps each agent's worker prints while the store is away and back: seconds of training, at 0.1 s a step.
STEPS = 20


class Agents:
    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        env = dict(os.environ, PYTHONPATH=SRC)
        self.store = StoreProcess(self.port, env)
        script = tmp_path / "train.py"
        script.write_text(TRAIN)
        command = [
            sys.executable, "-m", "trainguard.pod.torchrun", "--nnodes", "2:3", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", "job-uid",
            "--rdzv-conf", "is_host=false,last_call_timeout=1", "--max-restarts", "3", "--monitor-interval", "0.5",
            str(script),
        ]  # fmt: skip
        self.command, self.env = command, dict(env, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
        self.tmp_path = tmp_path
        self.logs: list[Path] = []
        self.agents: list[subprocess.Popen[bytes]] = []
        self.store.start()
        for _ in range(2):
            self.start()

    def start(self) -> None:
        log = self.tmp_path / f"agent-{len(self.logs)}.log"
        with log.open("w") as out:
            self.agents.append(
                subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env)
            )
        self.logs.append(log)

    def steps(self) -> list[int]:
        return [len(re.findall(r"^step ", log.read_text(), re.M)) for log in self.logs]

    def starts(self) -> list[list[tuple[int, int]]]:
        """Per agent: (world size, pid) of each start of its worker."""
        found = (
            re.findall(r"^start rank \d+ of (\d+) pid (\d+)", log.read_text(), re.M) for log in self.logs
        )
        return [[(int(world), int(pid)) for world, pid in starts] for starts in found]

    def alive(self) -> list[int | None]:
        return [agent.poll() for agent in self.agents]

    def explain(self) -> str:
        return f"agents' exits {self.alive()}, steps {self.steps()}; " + "; ".join(
            f"agent {i}: {log.read_text()[-1500:]!r}" for i, log in enumerate(self.logs)
        )

    def stop(self) -> None:
        for agent in self.agents:
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
        for agent in self.agents:
            try:
                agent.wait(timeout=30)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait(timeout=10)
        self.store.kill()


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Agents]:
    started = Agents(tmp_path)
    yield started
    started.stop()


def test_the_agents_train_on_through_the_stores_loss_and_a_later_crash_forms_a_round_on_the_new_store(
    agents: Agents,
) -> None:
    wait_for("both agents' workers training", lambda: min(agents.steps()) >= 3, START, agents.explain)
    agents.store.kill()
    agents.store.start()  # the same port, empty
    lost_at = agents.steps()
    wait_for(
        f"{STEPS} more steps on each agent after the store came back",
        lambda: all(now >= then + STEPS for now, then in zip(agents.steps(), lost_at, strict=True)),
        ROUND,
        agents.explain,
    )
    assert agents.alive() == [None, None], agents.explain()

    # A third agent joins: it waits in the round the two train in, which the new store holds again, and they
    # make room for it: all three start their workers in a world of 3.
    agents.start()
    wait_for(
        "a world of 3 on the new store",
        lambda: all(starts and starts[-1][0] == 3 for starts in agents.starts()),
        START,
        agents.explain,
    )

    # A worker's crash now: the agents restart their workers in a new round, formed on the new store.
    started = [len(starts) for starts in agents.starts()]
    os.kill(agents.starts()[0][-1][1], signal.SIGKILL)
    wait_for(
        "the three agents' workers started again",
        lambda: all(len(starts) > n for starts, n in zip(agents.starts(), started, strict=True)),
        START,
        agents.explain,
    )
    after = agents.steps()
    wait_for(
        "all train again",
        lambda: all(n > a for n, a in zip(agents.steps(), after, strict=True)),
        ROUND,
        agents.explain,
    )
    assert agents.alive() == [None, None, None], agents.explain()
