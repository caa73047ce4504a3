"""Live mode around its store and its members' names, with real processes (``live_worker.py``, DDP over gloo):
the store's process killed and started again on its port (empty) while 3 ranks train: they go on in their
processes, and a later fault and a newcomer still form their rounds on the new store; and two pods that share a
host name, each with pids of its own (a pid and a UTS namespace each, as pods on the host's network), are both
members."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

from live_harness import ROUND, SRC, START, WORKER, Rank, StoreProcess, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]


class Job:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.port = free_port()
        self.store = StoreProcess(self.port, dict(os.environ, PYTHONPATH=SRC))
        self.ranks: list[Rank] = []

    def start(self, seed: int, command: list[str] | None = None, world: int = 3) -> Rank:
        env = dict(os.environ, TRAINGUARD_LIVE_STORE=f"127.0.0.1:{self.port}", TRAINGUARD_LIVE_PREFIX="t/",
                   WORLD_SIZE=str(world), LIVE_SEED=str(seed), PYTHONPATH=SRC)  # fmt: skip
        self.ranks.append(Rank(env, self.tmp_path / f"rank-{seed}.stderr", command))
        return self.ranks[-1]

    def explain(self) -> str:
        return "; ".join(
            f"rank {i}: exit {r.process.poll()}, last step {r.last_step()}, rounds "
            f"{[(f['round'], f['world_size'], f['origin']) for f in r.formed()]}, stderr {r.stderr.read_text()[-600:]!r}"
            for i, r in enumerate(self.ranks)
        )


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    opened = Job(tmp_path)
    opened.store.start()
    yield opened
    for rank in opened.ranks:
        rank.stop()
    opened.store.kill()


def test_the_survivors_train_on_through_the_stores_restart_and_later_rounds_form_on_the_new_one(
    job: Job,
) -> None:
    a, b, c = job.start(1), job.start(2), job.start(3)
    wait_for("3 ranks training", lambda: all(r.last_step() >= 5 for r in (a, b, c)), START, job.explain)
    pids = [r.process.pid for r in (a, b, c)]

    job.store.kill()  # the store's pod lost: every connection to it fails
    down = {id(r): r.last_step() for r in (a, b, c)}
    wait_for("steps without the store", lambda: all(r.last_step() >= down[id(r)] + 10 for r in (a, b, c)),
             ROUND, job.explain)  # fmt: skip
    job.store.start()  # re-created on the same address, empty
    back = {id(r): r.last_step() for r in (a, b, c)}
    wait_for("steps with the new store", lambda: all(r.last_step() >= back[id(r)] + 10 for r in (a, b, c)),
             ROUND, job.explain)  # fmt: skip
    assert [r.formed()[-1]["round"] for r in (a, b, c)] == [1, 1, 1]  # no round ended for it
    store = job.store.client()
    wait_for(
        "the round published again", lambda: store.check(["t/latest", "t/r1/closed"]), ROUND, job.explain
    )

    # A later fault: c killed, marked gone in the new store (what its launcher does); a and b form a round.
    c.process.kill()
    store.set(f"t/gone/{c.member}", "1")
    wait_for("a and b on their own", lambda: all(r.formed()[-1]["world_size"] == 2 for r in (a, b)), ROUND,
             job.explain)  # fmt: skip
    # A newcomer reads the latest round from the new store and arrives after it: it gets the state from them.
    alone = a.formed()[-1]["round"]
    d = job.start(4)
    joined = wait_for("d's state", lambda: next(iter(d.formed()), None), START, job.explain)
    assert joined["origin"] == "peer"
    assert joined["round"] > alone
    wait_for(
        "3 ranks again", lambda: all(r.formed()[-1]["world_size"] == 3 for r in (a, b, d)), ROUND, job.explain
    )
    assert [r.process.pid for r in (a, b)] == pids[:2]
    assert [r.process.poll() for r in (a, b, d)] == [None, None, None]
    # Their state came from a live process each time: their own, or the other survivor's that had applied one
    # step more (c killed while its all-reduce had reached one of them only); never the disk or a fresh start.
    origins = [f["origin"] for r in (a, b) for f in r.formed()[1:]]
    assert set(origins) <= {"live", "peer"}, job.explain()


def _namespaces_work() -> bool:
    probe = ["unshare", "-U", "-r", "-u", "-p", "-f", "--mount-proc", "--kill-child", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_two_pods_that_share_a_host_name_are_both_members(job: Job) -> None:
    if not _namespaces_work():
        pytest.skip("no user, pid and UTS namespaces here (unshare -U -r -u -p)")
    # Each "pod": a pid namespace of its own (the worker is its pid 1 in both) and the same host name; the
    # network is shared, as on the host's network.
    pod = ["unshare", "-U", "-r", "-u", "-p", "-f", "--mount-proc", "--kill-child", "sh", "-c",
           f'hostname shared-host && exec "{sys.executable}" "{WORKER}"']  # fmt: skip
    a, b = job.start(1, pod, world=2), job.start(2, pod, world=2)
    wait_for("both training", lambda: all(r.last_step() >= 30 for r in (a, b)), START, job.explain)
    ready = [r.of("ready")[0] for r in (a, b)]
    assert [e["host"] for e in ready] == ["shared-host", "shared-host"]
    assert [e["pid"] for e in ready] == [1, 1]  # the old name, host:pid, was the same for both
    assert a.member != b.member
    # Neither took the other for ended: one round of 2 all along.
    assert [[(f["round"], f["world_size"]) for f in r.formed()] for r in (a, b)] == [[(1, 2)], [(1, 2)]]
    assert {s["world"] for r in (a, b) for s in r.steps()} == {2}
