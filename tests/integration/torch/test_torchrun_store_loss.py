"""torchrun's agents (``trainguard.pod.torchrun``, as every pod runs them) through the loss of their rendezvous
store: its process killed and started again on its port, empty (its pod created again on Kubernetes). The agents
stay, their workers train on, and a worker's crash afterwards forms a new round on the new store. With torch's own
store client, both agents end at their next look at the rendezvous (``RendezvousConnectionError``)."""

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
print(f"start rank {dist.get_rank()} pid {os.getpid()}", flush=True)
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
            sys.executable, "-m", "trainguard.pod.torchrun", "--nnodes", "2", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", "job-uid",
            "--rdzv-conf", "is_host=false,last_call_timeout=1", "--max-restarts", "3", "--monitor-interval", "0.5",
            str(script),
        ]  # fmt: skip
        self.logs = [tmp_path / f"agent-{i}.log" for i in range(2)]
        self.store.start()
        agent_env = dict(env, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
        self.agents = []
        for log in self.logs:
            with log.open("w") as out:
                self.agents.append(
                    subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=agent_env)
                )

    def steps(self) -> list[int]:
        return [len(re.findall(r"^step ", log.read_text(), re.M)) for log in self.logs]

    def starts(self) -> list[list[int]]:
        return [
            [int(p) for p in re.findall(r"^start rank \d+ pid (\d+)", log.read_text(), re.M)]
            for log in self.logs
        ]

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

    # A worker's crash now: both agents restart their workers in a new round, formed on the new store.
    victim = agents.starts()[0][-1]
    os.kill(victim, signal.SIGKILL)
    wait_for(
        "both agents' workers started again",
        lambda: all(len(pids) >= 2 for pids in agents.starts()),
        START,
        agents.explain,
    )
    after = agents.steps()
    wait_for(
        "both train again",
        lambda: all(n > a for n, a in zip(agents.steps(), after, strict=True)),
        ROUND,
        agents.explain,
    )
    assert agents.alive() == [None, None], agents.explain()
