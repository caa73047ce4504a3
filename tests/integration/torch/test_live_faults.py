"""Live mode's hard cases with real processes (``live_worker.py``, 3 ranks, a store of the test's own): the
sender of a state killed in the middle of the transfer (another survivor sends it then, and says so), and two
ranks killed at once (the last one goes on alone, in its process), and a newcomer's warm-up (it runs before
the newcomer arrives, never at the job's start, and a warm-up that trains or fails costs nothing)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from live_harness import ROUND, SRC, START, WORKER, Rank, free_port, tails, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


class Job:
    """The test's store and the ranks it started (``live_worker.py``, 3 to a round), and waiting on a condition
    whose failure tells every rank's last events and stderr."""

    def __init__(self, tmp_path: Path) -> None:
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        self.tmp_path = tmp_path
        self.port = free_port()
        self.store = TCPStore("127.0.0.1", self.port, is_master=True, wait_for_workers=False)
        self.ranks: list[Rank] = []

    def __call__(self, seed: int, prefix: tuple[str, ...] = (), **extra: str) -> Rank:
        env = dict(os.environ, TRAINGUARD_LIVE_STORE=f"127.0.0.1:{self.port}", TRAINGUARD_LIVE_PREFIX="t/",
                   LIVE_SEED=str(seed), PYTHONPATH=SRC, TRAINGUARD_LIVE_TRACE="1",
                   **{"WORLD_SIZE": "3", **extra})  # fmt: skip
        command = [*prefix, sys.executable, str(WORKER)] if prefix else None
        self.ranks.append(Rank(env, self.tmp_path / f"rank-{seed}.stderr", command))
        return self.ranks[-1]

    def gone(self, rank: Rank) -> None:
        """What its launcher does when a rank's process ended: marks its member gone in the store."""
        self.store.set(f"t/gone/{rank.member}", "1")

    def wait(self, what: str, check: Callable[[], Any], seconds: float) -> Any:
        return wait_for(what, check, seconds, lambda: tails(self.ranks))


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Job]:
    job = Job(tmp_path)
    yield job
    for rank in job.ranks:
        rank.stop()


def test_the_sender_killed_in_the_middle_of_a_transfer_another_survivor_sends(
    job: Job, tmp_path: Path
) -> None:
    hold = {"LIVE_HOLD_DIR": str(tmp_path)}
    a, b, c = job(1, **hold), job(2, **hold), job(3, **hold)
    job.wait("3 ranks training", lambda: all(len(r.steps()) >= 5 for r in (a, b, c)), START)
    c.process.kill()
    job.gone(c)
    job.wait("a and b on their own", lambda: all(r.formed()[-1]["world_size"] == 2 for r in (a, b)), ROUND)

    (tmp_path / "arm").touch()  # the next sender stops in the middle of its transfer
    d = job(4, **hold)
    sender_pid = int(job.wait("a sender", lambda: (tmp_path / "sending").exists() and
                              (tmp_path / "sending").read_text(), START))  # fmt: skip
    sender, other = (a, b) if sender_pid == a.process.pid else (b, a)
    os.kill(sender_pid, signal.SIGKILL)
    job.gone(sender)

    got = job.wait("d's state", lambda: next((f for f in d.formed() if f["origin"] == "peer"), None), ROUND)
    assert got["source"] == other.member  # the transfer restarted from the other survivor, and says so
    assert got["world_size"] == 2
    # The other survivor's state stayed in memory: its own, or its peer's one step ahead (a kill in the middle of
    # an all-reduce can reach one of them only); never the disk or a fresh start.
    assert {f["origin"] for f in other.formed()[1:]} <= {"live", "peer"}, other.formed()
    assert other.process.poll() is None  # the survivor kept its process through both
    check = job.wait("a step of both after", lambda: _common_step(other, d, after=got["step"] + 2), ROUND)
    assert check[0] == check[1]  # the same parameters: d trains from other's state


def test_two_ranks_killed_at_once_the_last_goes_on_alone(job: Job) -> None:
    a, b, c = job(1), job(2), job(3)
    job.wait("3 ranks training", lambda: all(len(r.steps()) >= 5 for r in (a, b, c)), START)
    reached = a.steps()[-1]["step"]
    for rank in (b, c):
        rank.process.kill()
        job.gone(rank)
    alone = job.wait("a alone", lambda: next((f for f in a.formed() if f["world_size"] == 1), None), ROUND)
    assert alone["origin"] == "live"
    assert alone["step"] >= reached  # no step lost
    job.wait("a's steps alone", lambda: any(s["world"] == 1 for s in a.steps()), ROUND)
    assert a.process.poll() is None


def test_a_member_lost_after_its_round_closed_is_not_waited_for(job: Job, tmp_path: Path) -> None:
    # The collectives' bound far above the test's: the round must not wait for it.
    die = {"LIVE_DIE_DIR": str(tmp_path), "LIVE_TIMEOUT": "600"}
    a, b, c = job(1, **die), job(2, **die), job(3, **die)
    job.wait("3 ranks training", lambda: all(len(r.steps()) >= 5 for r in (a, b, c)), START)
    (tmp_path / "die").touch()  # the first of the next round to make its group dies there
    c.process.kill()
    job.gone(c)
    died = job.wait("a member dead before its group", lambda: next(tmp_path.glob("died-*"), None), ROUND)
    dead = int(died.name.split("-")[1])
    assert dead in (a.process.pid, b.process.pid)  # a survivor of c's loss, in the round that closed after it
    last = a if dead == b.process.pid else b
    alone = job.wait(
        "the last alone", lambda: next((f for f in last.formed() if f["world_size"] == 1), None), ROUND
    )
    assert alone["origin"] == "live"
    job.wait("its steps alone", lambda: any(s["world"] == 1 for s in last.steps()), ROUND)
    assert last.process.poll() is None


def _common_step(x: Rank, y: Rank, after: int) -> tuple[float, float] | None:
    sums = {s["step"]: s["sum"] for s in x.steps() if s["step"] > after}
    for s in y.steps():
        if s["step"] in sums:
            return sums[s["step"]], s["sum"]
    return None


def test_a_newcomer_warms_up_before_it_arrives_and_its_warm_up_changes_no_state(
    job: Job,
) -> None:
    a, b, c = (job(seed, LIVE_WARMUP="forward") for seed in (1, 2, 3))
    job.wait("3 ranks training", lambda: all(len(r.steps()) >= 5 for r in (a, b, c)), START)
    for rank in (a, b, c):  # the job's start: every member as cold as the others, nothing to warm up for
        assert not [e for e in rank.events if e["event"] == "warmup"]
        assert rank.formed()[0]["warmup_seconds"] is None

    warmed_for: dict[str, float | None] = {}
    leaving = c
    for seed, mode in enumerate(("forward", "step", "fail"), start=4):
        leaving.process.kill()
        job.gone(leaving)
        new = job(seed, LIVE_WARMUP=mode)
        got = job.wait(f"the {mode} newcomer's state", lambda n=new: next(iter(n.formed()), None), START)
        warmed = [e for e in new.events if e["event"] == "warmup"]
        assert [e["t"] < got["t"] for e in warmed] == [True]  # once, before it arrived
        assert got["origin"] == "peer"
        # Both survivors are in its first round as a rule; on a loaded machine one whose beats stalled for
        # stale_after (or that came later than a collective's bound) is left out, and comes back in the next.
        job.wait(
            f"the {mode} newcomer in a round of 3",
            lambda n=new: any(f["world_size"] == 3 for f in n.formed()),
            ROUND,
        )
        step = got["step"]
        check = job.wait(
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


def test_a_fault_between_the_all_reduce_and_the_step_leaves_every_rank_with_the_same_parameters(
    job: Job, tmp_path: Path
) -> None:
    """Each rank in turn fails after its step's all-reduce and before its optimizer applies the step. The
    members agree before any applies a step (``trainguard.sdk._nccl.agree``): none applies that one, the next
    round starts from the last step all applied, and every rank's parameters hash the same after it (read, not
    assumed)."""
    faults = tmp_path / "faults"
    faults.mkdir()
    ranks = [job(seed, LIVE_FAULT_DIR=str(faults)) for seed in (1, 2, 3)]
    job.wait("3 ranks training", lambda: all(len(r.steps()) >= 5 for r in ranks), START)
    for victim in range(3):
        rounds = {id(r): len(r.formed()) for r in ranks}
        (faults / f"rank-{victim}").touch()
        failed = job.wait(
            f"rank {victim}'s fault",
            lambda v=victim: next(
                (e for r in ranks for e in r.events if e["event"] == "fault" and e["rank"] == v), None
            ),
            ROUND,
        )
        job.wait(
            f"a round after rank {victim}'s fault",
            lambda seen=rounds: all(
                len(r.formed()) > seen[id(r)] and r.formed()[-1]["world_size"] == 3 for r in ranks
            ),
            ROUND,
        )
        after = max(r.formed()[-1]["step"] for r in ranks)
        assert after <= failed["step"], (after, failed)  # the step the fault cut was applied by nobody

        def hashes(after: int = after) -> list[str] | None:
            by_rank = [{s["step"]: s["hash"] for s in r.steps() if s["step"] > after} for r in ranks]
            common = set.intersection(*(set(steps) for steps in by_rank))
            return [steps[min(common)] for steps in by_rank] if common else None

        seen = job.wait(f"a common step after rank {victim}'s fault", hashes, ROUND)
        assert len(set(seen)) == 1, seen
        assert all(r.process.poll() is None for r in ranks)  # nobody restarted: the same processes
