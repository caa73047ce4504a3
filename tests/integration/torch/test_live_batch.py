"""The same global batch through every change (``trainguard.GlobalBatch`` with ``ElasticSampler``), with real
processes (``batch_worker.py``, DDP over gloo): a run whose world goes 4 -> 3 (a rank killed) -> 4 (a newcomer)
-> 2 (two ranks removed) reaches the same parameters, step for step, as a run of one rank without faults.

Equal within floating-point tolerance, not bit for bit: the worlds sum the same gradient in different orders
(a rank's micro-batches, then gloo's all-reduce over 2, 3 or 4 ranks), each order rounding float32 its own way,
and the differences stay at the float32 rounding level over the run's steps (a contracting regression with a
small learning rate does not amplify them).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

import torch
from live_harness import ROUND, SRC, START, Rank, StoreProcess, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

WORKER = Path(__file__).with_name("batch_worker.py")
#: The faulted run's end, which it must not reach before its last resize (the test ends it after).
STEPS = 1500
#: float32 rounding over the run, with margin (the largest difference measured here: 1.5e-06, at step 250).
RTOL, ATOL = 1e-4, 1e-5


class Run:
    def __init__(self, tmp_path: Path, name: str) -> None:
        self.tmp_path = tmp_path
        self.name = name
        self.port = free_port()
        self.store = StoreProcess(self.port, dict(os.environ, PYTHONPATH=SRC))
        self.ranks: list[Rank] = []

    def start(self, world: int, delay: float, steps: int = STEPS) -> Rank:
        env = dict(os.environ, TRAINGUARD_LIVE_STORE=f"127.0.0.1:{self.port}", TRAINGUARD_LIVE_PREFIX="b/",
                   WORLD_SIZE=str(world), BATCH_STEPS=str(steps), BATCH_DELAY=str(delay), PYTHONPATH=SRC)  # fmt: skip
        stderr = self.tmp_path / f"{self.name}-{len(self.ranks)}.stderr"
        self.ranks.append(Rank(env, stderr, [sys.executable, str(WORKER)]))
        return self.ranks[-1]

    def remove(self, rank: Rank) -> None:
        """The rank ends as its pod's would (killed), and is marked gone, as its launcher does."""
        rank.process.kill()
        self.store.client().set(f"b/gone/{rank.member}", "1")

    def params(self) -> dict[int, list[float]]:
        return {e["step"]: e["params"] for r in self.ranks for e in r.steps() if "params" in e}

    def worlds(self) -> list[int]:
        """The worlds rank 0 trained in, in order, each once."""
        seen = sorted((e["t"], e["world"]) for r in self.ranks for e in r.steps() if e["rank"] == 0)
        return [world for i, (_, world) in enumerate(seen) if i == 0 or seen[i - 1][1] != world]

    def explain(self) -> str:
        return "; ".join(
            f"{self.name} {i}: exit {r.process.poll()}, last step {r.last_step()}, rounds "
            f"{[(f['round'], f['world_size'], f['origin']) for f in r.formed()]}, "
            f"stderr {r.stderr.read_text()[-400:]!r}"
            for i, r in enumerate(self.ranks)
        )

    def close(self) -> None:
        for rank in self.ranks:
            rank.stop()
        self.store.kill()


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[list[Run]]:
    opened: list[Run] = []
    yield opened
    for run in opened:
        run.close()


def _open(runs: list[Run], tmp_path: Path, name: str) -> Run:
    run = Run(tmp_path, name)
    run.store.start()
    runs.append(run)
    return run


def _world_steps(run: Run, ranks: list[Rank], world: int, after: int) -> Any:
    return all(any(e["world"] == world and e["step"] > after for e in r.steps()) for r in ranks)


def test_a_kill_and_two_resizes_keep_the_global_batch_and_the_parameters_of_a_run_without_faults(
    runs: list[Run], tmp_path: Path
) -> None:
    faulted = _open(runs, tmp_path, "faulted")
    a, b, c, d = (faulted.start(4, 0.02) for _ in range(4))
    wait_for("4 ranks training", lambda: _world_steps(faulted, [a, b, c, d], 4, 5), START, faulted.explain)
    # 1. A rank killed: the 3 others re-form and take the same global batch in 3 shares.
    faulted.remove(d)
    reached = max(r.last_step() for r in (a, b, c))
    wait_for("a world of 3", lambda: _world_steps(faulted, [a, b, c], 3, reached), ROUND, faulted.explain)
    # 2. A newcomer: a world of 4 again.
    e = faulted.start(4, 0.02)
    wait_for("a world of 4 with the newcomer", lambda: _world_steps(faulted, [a, b, c, e], 4, reached),
             START, faulted.explain)  # fmt: skip
    # 3. Two ranks removed: a world of 2.
    faulted.remove(a)
    faulted.remove(b)
    reached = max(r.last_step() for r in (c, e))
    wait_for("a world of 2", lambda: _world_steps(faulted, [c, e], 2, reached + 30), ROUND, faulted.explain)
    last = max(r.last_step() for r in (c, e))
    assert last < STEPS, f"the faulted run reached its end before its last resize: {faulted.explain()}"

    assert faulted.worlds() == [4, 3, 4, 2], faulted.explain()
    plans = {(s["world"], s["micro"], s["accumulation"]) for r in faulted.ranks for s in r.steps()}
    assert plans == {(4, 1, 3), (3, 2, 2), (2, 2, 3)}  # 12 samples a step in every world
    compared = faulted.params()
    assert max(compared) > reached + 20  # steps after the last resize are among those compared
    faulted.close()

    # The run without faults: one rank alone (12 samples in 6 micro-batches a step), as far as the other went.
    calm = _open(runs, tmp_path, "calm")
    alone = calm.start(1, 0.0, steps=max(compared))
    wait_for("the run without faults to end", lambda: alone.of("done"), START + 120, calm.explain)
    reference = calm.params()
    assert sorted(reference) == sorted(compared)
    assert {(s["world"], s["micro"], s["accumulation"]) for s in alone.steps()} == {(1, 2, 6)}
    worst = 0.0
    for step, params in sorted(compared.items()):
        got, want = torch.tensor(params), torch.tensor(reference[step])
        worst = max(worst, float((got - want).abs().max()))
        assert torch.allclose(got, want, rtol=RTOL, atol=ATOL), (step, worst)
    print(f"\nthe same global batch: {len(compared)} steps compared up to step {max(compared)}, "
          f"the largest difference {worst:.2e}")  # fmt: skip
