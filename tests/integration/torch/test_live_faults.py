"""Live mode's hard cases with real processes (``live_worker.py``, 3 ranks, a store of the test's own): the
sender of a state killed in the middle of the transfer (another survivor sends it then, and says so), and two
ranks killed at once (the last one goes on alone, in its process), and a newcomer's warm-up (it runs before
the newcomer arrives, never at the job's start, and a warm-up that trains or fails costs nothing)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

from live_harness import ROUND, SRC, START, Rank, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Callable[..., Rank]]:
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    port = free_port()
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    ranks: list[Rank] = []

    def start(seed: int, **extra: str) -> Rank:
        env = dict(os.environ, TRAINGUARD_LIVE_STORE=f"127.0.0.1:{port}", TRAINGUARD_LIVE_PREFIX="t/",
                   WORLD_SIZE="3", LIVE_SEED=str(seed), PYTHONPATH=SRC, **extra)  # fmt: skip
        ranks.append(Rank(env, tmp_path / f"rank-{seed}.stderr"))
        return ranks[-1]

    start.store = store  # type: ignore[attr-defined]
    start.ranks = ranks  # type: ignore[attr-defined]
    yield start
    for rank in ranks:
        rank.stop()


def test_the_sender_killed_in_the_middle_of_a_transfer_another_survivor_sends(
    job: Callable[..., Rank], tmp_path: Path
) -> None:
    hold = {"LIVE_HOLD_DIR": str(tmp_path)}
    a, b, c = job(1, **hold), job(2, **hold), job(3, **hold)
    wait_for("3 ranks training", lambda: all(len(r.steps()) >= 5 for r in (a, b, c)), START)
    c.process.kill()
    job.store.set(f"t/gone/{c.member}", "1")  # type: ignore[attr-defined]  # what c's launcher does
    wait_for("a and b on their own", lambda: all(r.formed()[-1]["world_size"] == 2 for r in (a, b)), ROUND)

    (tmp_path / "arm").touch()  # the next sender stops in the middle of its transfer
    d = job(4, **hold)
    sender_pid = int(wait_for("a sender", lambda: (tmp_path / "sending").exists() and
                              (tmp_path / "sending").read_text(), START))  # fmt: skip
    sender, other = (a, b) if sender_pid == a.process.pid else (b, a)
    os.kill(sender_pid, signal.SIGKILL)
    job.store.set(f"t/gone/{sender.member}", "1")  # type: ignore[attr-defined]

    got = wait_for("d's state", lambda: next((f for f in d.formed() if f["origin"] == "peer"), None), ROUND)
    assert got["source"] == other.member  # the transfer restarted from the other survivor, and says so
    assert got["world_size"] == 2
    assert [f["origin"] for f in other.formed()[1:]] == ["live"] * (len(other.formed()) - 1)
    assert other.process.poll() is None  # the survivor kept its process through both
    check = wait_for("a step of both after", lambda: _common_step(other, d, after=got["step"] + 2), ROUND)
    assert check[0] == check[1]  # the same parameters: d trains from other's state


def test_two_ranks_killed_at_once_the_last_goes_on_alone(job: Callable[..., Rank]) -> None:
    a, b, c = job(1), job(2), job(3)
    wait_for("3 ranks training", lambda: all(len(r.steps()) >= 5 for r in (a, b, c)), START)
    reached = a.steps()[-1]["step"]
    for rank in (b, c):
        rank.process.kill()
        job.store.set(f"t/gone/{rank.member}", "1")  # type: ignore[attr-defined]
    alone = wait_for("a alone", lambda: next((f for f in a.formed() if f["world_size"] == 1), None), ROUND)
    assert alone["origin"] == "live"
    assert alone["step"] >= reached  # no step lost
    wait_for("a's steps alone", lambda: any(s["world"] == 1 for s in a.steps()), ROUND)
    assert a.process.poll() is None


def _common_step(x: Rank, y: Rank, after: int) -> tuple[float, float] | None:
    sums = {s["step"]: s["sum"] for s in x.steps() if s["step"] > after}
    for s in y.steps():
        if s["step"] in sums:
            return sums[s["step"]], s["sum"]
    return None


def test_a_newcomer_warms_up_before_it_arrives_and_its_warm_up_changes_no_state(
    job: Callable[..., Rank],
) -> None:
    a, b, c = (job(seed, LIVE_WARMUP="forward") for seed in (1, 2, 3))
    wait_for("3 ranks training", lambda: all(len(r.steps()) >= 5 for r in (a, b, c)), START)
    for rank in (a, b, c):  # the job's start: every member as cold as the others, nothing to warm up for
        assert not [e for e in rank.events if e["event"] == "warmup"]
        assert rank.formed()[0]["warmup_seconds"] is None

    warmed_for: dict[str, float | None] = {}
    leaving = c
    for seed, mode in enumerate(("forward", "step", "fail"), start=4):
        leaving.process.kill()
        job.store.set(f"t/gone/{leaving.member}", "1")  # type: ignore[attr-defined]  # its launcher's mark
        new = job(seed, LIVE_WARMUP=mode)
        got = wait_for(f"the {mode} newcomer's state", lambda n=new: next(iter(n.formed()), None), START)
        warmed = [e for e in new.events if e["event"] == "warmup"]
        assert [e["t"] < got["t"] for e in warmed] == [True]  # once, before it arrived
        assert got["origin"] == "peer"
        # Both survivors are in its first round as a rule; on a loaded machine one whose beats stalled for
        # stale_after (or that came later than a collective's bound) is left out, and comes back in the next.
        wait_for(
            f"the {mode} newcomer in a round of 3",
            lambda n=new: any(f["world_size"] == 3 for f in n.formed()),
            ROUND,
        )
        step = got["step"]
        check = wait_for(
            f"a step of a and the {mode} newcomer", lambda n=new, s=step: _common_step(a, n, s), ROUND
        )
        assert check[0] == check[1]  # its warm-up's backward (or refused step) left nothing of its own
        warmed_for[mode] = got["warmup_seconds"]
        leaving = new
    assert (warmed_for["forward"] or 0) > 0
    assert (warmed_for["step"], warmed_for["fail"]) == (None, None)  # told, and joined without it
    errors = "".join(r.stderr.read_text() for r in job.ranks)  # type: ignore[attr-defined]
    assert "Live(warmup=...) stepped an optimizer" in errors
    assert "the warm-up failed (ValueError: a warm-up that fails); joining without it" in errors
    assert (a.process.poll(), b.process.poll()) == (None, None)  # the survivors kept their processes
