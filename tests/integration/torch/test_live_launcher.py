"""The live launcher (``python -m trainguard.pod.torchrun --live``) with real workers (``live_worker.py``) and
the job's store as a process: a worker that dies before its first round (a restart of one, or a replacement
pod's first start), for anything but a static world's variable missing, is started again, alone; its pod stays
in live mode, and the pod's other worker goes on in its process. And the launcher marks its workers gone in a
store that came back empty."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch")

from live_harness import ROUND, SRC, START, WORKER, Rank, StoreProcess, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

#: What the launcher says when it takes the script for one that does not use ``Live``.
SWITCHED = "does not use trainguard.Live"


class Pod:
    """One pod's launcher, its workers' events on its stdout, its worker events in a file."""

    def __init__(self, tmp_path: Path, port: int, name: str, generation: int, nproc: int) -> None:
        self.events_file = tmp_path / f"{name}-{generation}.events"
        self.fail_once = tmp_path / f"{name}-{generation}.fail-once"
        env = dict(os.environ, PYTHONPATH=SRC, TRAINGUARD_LIVE_SIZE="3", TRAINGUARD_LIVE_MINIMUM="1",
                   TRAININGJOB_POD_NAME=name, TRAINGUARD_GENERATION=str(generation),
                   TRAINGUARD_WORKER_EVENTS=str(self.events_file), LIVE_FAIL_ONCE=str(self.fail_once),
                   LIVE_SEED=str(generation))  # fmt: skip
        command = [sys.executable, "-m", "trainguard.pod.torchrun", "--live", "--nnodes=1:2",
                   f"--nproc-per-node={nproc}", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=job",
                   "--max-restarts=3", str(WORKER)]  # fmt: skip
        self.launcher = Rank(env, tmp_path / f"{name}-{generation}.stderr", command)

    def workers(self) -> dict[int, list[dict[str, Any]]]:
        """Each worker's events by its pid, in the order they came."""
        found: dict[int, list[dict[str, Any]]] = {}
        for event in list(self.launcher.events):
            found.setdefault(event["pid"], []).append(event)
        return found

    def world(self, pid: int) -> int | None:
        steps = [e for e in self.workers().get(pid, []) if e["event"] == "step"]
        return steps[-1]["world"] if steps else None

    def worker_events(self) -> list[dict[str, Any]]:
        if not self.events_file.exists():
            return []
        return [json.loads(line) for line in self.events_file.read_text().splitlines() if line.strip()]

    def explain(self) -> str:
        return (
            f"{self.events_file.stem}: launcher exit {self.launcher.process.poll()}, workers "
            f"{ {pid: [e['event'] for e in ev][-3:] for pid, ev in self.workers().items()} }, events "
            f"{[e['event'] for e in self.worker_events()]}, stderr {self.launcher.stderr.read_text()[-1500:]!r}"
        )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StoreProcess]:
    served = StoreProcess(free_port(), dict(os.environ, PYTHONPATH=SRC))
    served.start()
    yield served
    served.kill()


def test_a_worker_that_dies_before_its_first_round_is_started_again_and_the_pod_stays_live(
    tmp_path: Path, store: StoreProcess
) -> None:
    pods: list[Pod] = []

    def explain() -> str:
        return "; ".join(pod.explain() for pod in pods)

    def training(pod: Pod, pid: int, world: int) -> bool:
        return pod.world(pid) == world

    a = Pod(tmp_path, store.port, "job-worker-0", 1, nproc=2)
    b = Pod(tmp_path, store.port, "job-worker-1", 1, nproc=1)
    pods += [a, b]
    wait_for("3 workers training", lambda: len(a.workers()) == 2 and len(b.workers()) == 1 and
             all(training(p, pid, 3) for p in (a, b) for pid in p.workers()), START, explain)  # fmt: skip
    a0, a1 = sorted(a.workers())
    try:
        # 1. A replacement pod (the next incarnation of job-worker-1) whose first start fails before its first
        #    round: its launcher starts that worker again, which joins.
        (b0,) = b.workers()
        b.launcher.stop()
        os.kill(b0, 9)
        replacement = Pod(tmp_path, store.port, "job-worker-1", 2, nproc=1)
        replacement.fail_once.touch()
        pods.append(replacement)
        joined = wait_for("the replacement's second start in a round of 3", lambda: next(
            (pid for pid, ev in replacement.workers().items() if training(replacement, pid, 3)), None),
            START * 2, explain)  # fmt: skip
        failed = [pid for pid, ev in replacement.workers().items() if ev[0]["event"] == "failing"]
        assert len(failed) == 1, explain()
        assert joined != failed[0]
        kinds = [e["event"] for e in replacement.worker_events()]
        assert "failed" in kinds, explain()
        assert "live-unused" not in kinds, explain()

        # 2. In pod 0, worker 1 killed, and its restart fails before its first round: started once more.
        a.fail_once.touch()
        os.kill(a1, 9)
        again = wait_for("a1's third start in a round of 3", lambda: next(
            (pid for pid in a.workers() if pid not in (a0, a1) and training(a, pid, 3)), None),
            START * 2, explain)  # fmt: skip
        assert [e["event"] for e in a.worker_events()].count("failed") == 2, explain()
        assert "live-unused" not in [e["event"] for e in a.worker_events()], explain()
        assert again in a.workers()
        # Neither pod was switched to torchrun's agent, and pod 0's other worker went on in its process.
        for pod in (a, replacement):
            assert SWITCHED not in pod.launcher.stderr.read_text(), explain()
            assert pod.launcher.process.poll() is None, explain()
        assert [e["event"] for e in a.workers()[a0]].count("ready") == 1
        wait_for("a0 in the round of 3", lambda: training(a, a0, 3), ROUND, explain)
        restarted = [f["pid"] for e in a.worker_events() if e["event"] == "failed" for f in e["failures"]]
        assert a0 not in restarted, explain()
    finally:
        for pod in pods:
            pod.launcher.process.terminate()
        for pod in pods:
            try:
                pod.launcher.process.wait(timeout=60)
            finally:
                pod.launcher.stop()


def test_the_launcher_marks_a_worker_gone_in_a_store_that_came_back(store: StoreProcess) -> None:
    from trainguard.pod import contract, livelaunch

    options = SimpleNamespace(nproc_per_node="1", max_restarts="0", rdzv_endpoint=f"127.0.0.1:{store.port}",
                              rdzv_id="job", nnodes="1")  # fmt: skip
    launcher = livelaunch.Launcher(options, {})
    launcher.members = {0: "job-worker-0/1/41/5/-", 1: "job-worker-0/1/42/6/-"}
    keys = contract.LiveKeys(contract.live_prefix("job"))
    try:
        launcher.gone(0)
        assert store.client().check([keys.gone("job-worker-0/1/41/5/-")])
        store.kill()
        store.start()  # empty, on the same port: the launcher's client is lost
        launcher.gone(1)
        assert store.client().check([keys.gone("job-worker-0/1/42/6/-")])
        assert launcher.latest_round() == 0
    finally:
        launcher.marks.rmdir()
