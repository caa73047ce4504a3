"""Live mode with a sharded state (FSDP2 over gloo, ``Live(build=...)``), with real processes
(``sharded_worker.py``: 4 ranks of a small MLP, each rank's shard copied to its buddy at each step's end), against
a run of 4 ranks without faults:

- a rank killed and replaced (the round waits for 4 members, ``TRAINGUARD_LIVE_MINIMUM``): the lost shard comes
  to the replacement from its buddy, no step is lost, and the parameters are byte-equal, step for step (the same
  world shards the same rows on the same ranks, which compute the same sums);
- a scale 4 -> 3 -> 4 with the same global batch (``trainguard.GlobalBatch``): each round re-shards the state
  among its members from what they hold, no step is lost, and the parameters stay within float32 rounding of the
  run without faults (``RTOL``, ``ATOL``: a world of 3 sums each gradient in another order);

and in both, no state is read from disk: ``restore=`` is called only in the first round (where nobody holds a
state, and it finds nothing), every later round's origin is ``live`` or ``peer``. A rank killed with its buddy
leaves a shard with no holder: the survivors fall back to ``restore=`` and say so (stderr, and the round's
origin).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

import torch
from live_harness import ROUND, SRC, START, Rank, StoreProcess, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

WORKER = Path(__file__).with_name("sharded_worker.py")
#: The steps of every run: the faulted runs' faults and re-formations all come well before it (each newcomer is
#: started ahead and told when to arrive: its python's start costs no steps).
STEPS = 100
#: Seconds a step of the faulted runs sleeps: its faults land between steps as often as inside them.
DELAY = 0.03
#: float32 rounding over the run, with margin (as ``test_live_batch.py``'s: a contracting regression with a
#: small learning rate does not amplify it).
RTOL, ATOL = 1e-4, 1e-5


class Run:
    def __init__(self, tmp_path: Path, name: str) -> None:
        self.tmp_path = tmp_path
        self.name = name
        self.port = free_port()
        self.store = StoreProcess(self.port, dict(os.environ, PYTHONPATH=SRC))
        self.ranks: list[Rank] = []

    def start(self, pod: str, delay: float, **env: str) -> Rank:
        environ = dict(os.environ, TRAINGUARD_LIVE_STORE=f"127.0.0.1:{self.port}", TRAINGUARD_LIVE_PREFIX="s/",
                       WORLD_SIZE="4", SHARDED_STEPS=str(STEPS), SHARDED_DELAY=str(delay),
                       TRAININGJOB_POD_NAME=pod, PYTHONPATH=SRC, **env)  # fmt: skip
        stderr = self.tmp_path / f"{self.name}-{len(self.ranks)}.stderr"
        self.ranks.append(Rank(environ, stderr, [sys.executable, str(WORKER)]))
        return self.ranks[-1]

    def remove(self, rank: Rank) -> None:
        """The rank ends as its pod's would (killed), and is marked gone, as its launcher does."""
        rank.process.kill()
        self.store.client().set(f"s/gone/{rank.member}", "1")

    def by_rank(self, rank: int) -> Rank:
        """The process that last trained as ``rank``."""
        return max(
            (r for r in self.ranks if r.steps()), key=lambda r: (r.steps()[-1]["rank"] == rank, r.last_step())
        )

    def hashes(self) -> dict[tuple[int, int], str]:
        """Each rank's shards' hash at each step (the last one written: a step redone after a fault is the same)."""
        return {(e["step"], e["rank"]): e["shard"] for r in self.ranks for e in r.steps()}

    def params(self) -> dict[int, tuple[str, list[float]]]:
        return {e["step"]: (e["hash"], e["params"]) for r in self.ranks for e in r.steps() if "params" in e}

    def worlds(self) -> list[int]:
        """The worlds rank 0 trained in, in order, each once."""
        seen = sorted((e["t"], e["world"]) for r in self.ranks for e in r.steps() if e["rank"] == 0)
        return [world for i, (_, world) in enumerate(seen) if i == 0 or seen[i - 1][1] != world]

    def explain(self) -> str:
        return "; ".join(
            f"{self.name} {i}: exit {r.process.poll()}, last step {r.last_step()}, rounds "
            f"{[(f['round'], f['world_size'], f['step'], f['origin']) for f in r.formed()]}, "
            f"stderr {r.stderr.read_text()[-600:]!r}"
            for i, r in enumerate(self.ranks)
        )

    def close(self) -> None:
        for rank in self.ranks:
            rank.stop()
        self.store.kill()


def _open(tmp_path: Path, name: str) -> Run:
    run = Run(tmp_path, name)
    run.store.start()
    return run


@pytest.fixture(scope="module")
def calm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The run without faults: 4 ranks, ``STEPS`` steps."""
    run = _open(tmp_path_factory.mktemp("calm"), "calm")
    try:
        ranks = [run.start(f"pod-{i}", 0.0) for i in range(4)]
        wait_for("the run without faults to end", lambda: all(r.of("done") for r in ranks), START + STEPS,
                 run.explain)  # fmt: skip
        assert run.worlds() == [4], run.explain()
        yield run
    finally:
        run.close()


@pytest.fixture
def faulted(tmp_path: Path) -> Iterator[Run]:
    run = _open(tmp_path, "faulted")
    yield run
    run.close()


def _training(ranks: list[Rank], world: int, after: int) -> bool:
    return all(any(e["world"] == world and e["step"] > after for e in r.steps()) for r in ranks)


def _no_disk(run: Run) -> None:
    """``restore=`` only in the first round (nobody held a state yet), every later round's state from memory."""
    for rank in run.ranks:
        assert all(e["round"] == 1 for e in rank.of("restore")), run.explain()
        assert all(f["origin"] in ("live", "peer") for f in rank.formed() if f["round"] > 1), run.explain()


def _steps_lost(survivor: Rank, round_: int) -> int:
    """The steps ``survivor`` had completed before round ``round_`` formed, past the step the round formed at (a
    step whose end a newcomer's arrival interrupts is complete, and counted, before the worker writes its line:
    the round then forms one step past the last line, and none is lost)."""
    formed = next(e for e in survivor.formed() if e["round"] == round_)
    before = [e["step"] for e in survivor.steps() if e["t"] <= formed["t"]]
    return max(0, max(before) - formed["step"])


def test_a_killed_rank_is_replaced_from_its_buddy_with_no_step_lost_and_byte_equal_parameters(
    calm: Run, faulted: Run
) -> None:
    ranks = [faulted.start(f"pod-{i}", DELAY, TRAINGUARD_LIVE_MINIMUM="4") for i in range(4)]
    wait_for("4 ranks training", lambda: _training(ranks, 4, 10), START, faulted.explain)
    go = faulted.tmp_path / "go"
    newcomer = faulted.start("pod-1", DELAY, TRAINGUARD_LIVE_MINIMUM="4", SHARDED_GO=str(go))
    wait_for("the replacement ready", lambda: newcomer.of("ready"), START, faulted.explain)
    lost = faulted.by_rank(1)
    survivors = [r for r in ranks if r is not lost]
    faulted.remove(lost)
    go.touch()
    wait_for("the replacement training", lambda: _training([newcomer], 4, 0), START, faulted.explain)
    wait_for("the run to end", lambda: all(r.of("done") for r in [*survivors, newcomer]), ROUND + STEPS,
             faulted.explain)  # fmt: skip

    (joined,) = newcomer.formed()
    # The replacement takes the lost rank's slot, and its shard alone moves, from the buddy; the others stay.
    assert (joined["origin"], joined["world_size"], joined["rank"]) == ("peer", 4, 1), joined
    assert joined["bytes"] > 0, joined
    for survivor in survivors:
        before, after = survivor.formed()[0], survivor.formed()[-1]
        assert (after["round"], after["rank"], after["origin"], after["bytes"]) == (
            joined["round"],
            before["rank"],
            "live",
            0,
        ), faulted.explain()
    assert [_steps_lost(r, joined["round"]) for r in survivors] == [0, 0, 0], faulted.explain()
    _no_disk(faulted)
    assert faulted.worlds() == [4], faulted.explain()
    want, got = calm.hashes(), faulted.hashes()
    assert set(got) <= set(want), sorted(set(got) - set(want))[:10]
    after = {(step, rank) for step in range(joined["step"] + 1, STEPS + 1) for rank in range(4)}
    assert after <= set(got), sorted(after - set(got))[:10]  # every step since the replacement, every rank
    differ = sorted(key for key in want if got[key] != want[key])
    assert not differ, f"shards differ from the run without faults at (step, rank) {differ[:10]}"
    whole = {step: digest for step, (digest, _) in calm.params().items()}
    assert {step: digest for step, (digest, _) in faulted.params().items()}.items() <= whole.items()
    print(f"\nreplaced from the buddy: {joined['bytes']} bytes, the state in place {joined['transfer_seconds']} s "
          f"after the round closed (the survivors: {[r.formed()[-1]['transfer_seconds'] for r in survivors]} s); "
          f"{len(got)} shards byte-equal up to step {STEPS}")  # fmt: skip


def test_a_scale_from_4_to_3_to_4_reshards_in_memory_with_no_step_lost(calm: Run, faulted: Run) -> None:
    go = faulted.tmp_path / "go"
    newcomer = faulted.start("pod-4", DELAY, SHARDED_GO=str(go))
    ranks = [faulted.start(f"pod-{i}", DELAY) for i in range(4)]
    wait_for("4 ranks training", lambda: _training(ranks, 4, 10), START, faulted.explain)
    wait_for("the newcomer ready", lambda: newcomer.of("ready"), START, faulted.explain)
    # 1. A rank removed: the 3 others re-shard the state among them, the lost rank's rows from its buddy.
    lost = faulted.by_rank(2)
    survivors = [r for r in ranks if r is not lost]
    faulted.remove(lost)
    reached = max(r.last_step() for r in survivors)
    wait_for("a world of 3", lambda: _training(survivors, 3, reached + 5), ROUND, faulted.explain)
    # 2. The newcomer arrives: a world of 4 again, re-sharded from the 3 members' shards.
    go.touch()
    members = [*survivors, newcomer]
    wait_for("a world of 4 with the newcomer", lambda: _training(members, 4, reached), ROUND, faulted.explain)
    wait_for("the run to end", lambda: all(r.of("done") for r in members), ROUND + STEPS, faulted.explain)

    assert faulted.worlds() == [4, 3, 4], faulted.explain()
    plans = {(s["world"], s["micro"], s["accumulation"]) for r in faulted.ranks for s in r.steps()}
    assert plans == {(4, 1, 3), (3, 2, 2)}  # 12 samples a step in every world
    rounds = sorted({f["round"] for r in survivors for f in r.formed() if f["round"] > 1})
    assert len(rounds) == 2, faulted.explain()
    assert [_steps_lost(r, n) for n in rounds for r in survivors] == [0] * 6, faulted.explain()
    assert newcomer.formed()[0]["origin"] == "peer", faulted.explain()
    assert newcomer.formed()[0]["warmup_seconds"] is not None, faulted.explain()  # built once before it came
    print(f"\nthe newcomer warmed up in {newcomer.formed()[0]['warmup_seconds']} s; its state in place "
          f"{newcomer.formed()[0]['transfer_seconds']} s after the round closed")  # fmt: skip
    _no_disk(faulted)
    compared, reference = faulted.params(), calm.params()
    # Every EVERY-th step's line carries them; a step whose end a newcomer's arrival interrupted has no line.
    assert set(compared) <= set(reference)
    assert max(compared) == STEPS
    assert len(compared) >= len(reference) - 2, sorted(set(reference) - set(compared))
    worst = 0.0
    for step, (_, params) in sorted(compared.items()):
        got, want = torch.tensor(params), torch.tensor(reference[step][1])
        worst = max(worst, float((got - want).abs().max()))
        assert torch.allclose(got, want, rtol=RTOL, atol=ATOL), (step, worst)
    copies = [(e["copies"], e["copy_s"]) for r in members for e in r.steps()[-1:]]
    print(f"\nre-sharded 4 -> 3 -> 4: {len(compared)} steps compared, the largest difference {worst:.2e}; "
          f"the buddy copy {1000 * sum(s for _, s in copies) / sum(n for n, _ in copies):.2f} ms a step")  # fmt: skip


def test_a_shard_lost_with_its_buddy_falls_back_to_restore_and_says_so(faulted: Run) -> None:
    ranks = [faulted.start(f"pod-{i}", DELAY, SHARDED_RESTORE="initial") for i in range(4)]
    wait_for("4 ranks training", lambda: _training(ranks, 4, 10), START, faulted.explain)
    # Rank 1 and its buddy (rank 2: the next rank on another pod) killed together: rank 1's shard is gone.
    lost = [faulted.by_rank(1), faulted.by_rank(2)]
    survivors = [r for r in ranks if r not in lost]
    for rank in lost:
        rank.process.kill()
    client = faulted.store.client()
    for rank in lost:
        client.set(f"s/gone/{rank.member}", "1")
    wait_for("a world of 2 from the restore", lambda: all(len(r.formed()) > 1 for r in survivors), ROUND,
             faulted.explain)  # fmt: skip
    for survivor in survivors:
        formed = survivor.formed()[1]
        assert (formed["world_size"], formed["origin"], formed["step"]) == (2, "disk", 0), faulted.explain()
        said = survivor.stderr.read_text()
        assert "the shards of ranks [1] of round 1 (a world of 4)" in said, said
        assert "falling back to Live(restore=...)" in said, said
        assert "restored by Live(restore=...) from disk at step 0" in said, said
    wait_for("a world of 2 training", lambda: _training(survivors, 2, 5), ROUND, faulted.explain)
