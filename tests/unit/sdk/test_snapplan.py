"""Which step every rank resumes from (trainguard.sdk._snapplan): a table of cases, and properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.sdk._snapplan import BUDDY, DISK, MEMORY, PEER, Fetch, Held, ReshardError, choose


def own(step: int, shard: int = 0, world: int = 3, replicated: bool = True) -> Held:
    return Held(step, shard, world, replicated, buddy=False)


def copy(step: int, shard: int = 0, world: int = 3, replicated: bool = True) -> Held:
    return Held(step, shard, world, replicated, buddy=True)


@pytest.mark.parametrize(
    ("held", "disk", "step", "sources", "fetches"),
    [
        # A worker restarted in its pod: every rank has the step in its own memory.
        ([[own(7)], [own(7)], [own(7)]], 0, 7, (MEMORY,) * 3, ()),
        # One rank finished a step the others did not snapshot yet: the newest wins, sent to the two.
        ([[own(7)], [own(8)], [own(7)]], None, 8, (PEER, MEMORY, PEER), (Fetch(0, 1, (0, 2)),)),
        # A replacement pod on a new node: nothing there, its peers send it.
        ([[own(9)], [], [own(9)]], 5, 9, (MEMORY, PEER, MEMORY), (Fetch(0, 0, (1,)),)),
        # Only a buddy copy on the node.
        ([[copy(9)], [own(9)]], None, 9, (BUDDY, MEMORY), ()),
        # Disk newer than any memory (memory was lost): disk for all.
        ([[own(3)], [own(3)]], 10, 10, (DISK, DISK), ()),
        # Nothing in memory: disk.
        ([[], []], 4, 4, (DISK, DISK), ()),
    ],
)
def test_replicated_state(held, disk, step, sources, fetches) -> None:  # type: ignore[no-untyped-def]
    plan = choose(held, disk, replicated=True)
    assert plan is not None
    assert (plan.step, plan.sources, plan.fetches) == (step, sources, fetches)


def test_nothing_anywhere_is_a_fresh_start() -> None:
    assert choose([[], [], []], None, replicated=True) is None


def test_sharded_state_needs_every_shard_of_one_step() -> None:
    held = [
        [own(5, 0, 2, False), own(6, 0, 2, False)],
        [own(5, 1, 2, False), copy(6, 0, 2, False)],  # shard 1 of step 6 is nowhere
    ]
    plan = choose(held, None, replicated=False)
    assert plan is not None
    assert (plan.step, plan.sources, plan.shards) == (5, (MEMORY, MEMORY), (0, 1))


def test_a_lost_shard_comes_from_its_buddy_copy() -> None:
    # Rank 1's node was lost; its shard of step 6 was replicated to rank 0's node.
    held = [[own(6, 0, 2, False), copy(6, 1, 2, False)], []]
    plan = choose(held, 2, replicated=False)
    assert plan is not None
    assert (plan.step, plan.sources, plan.fetches) == (6, (MEMORY, PEER), (Fetch(1, 0, (1,)),))


def test_sharded_state_of_another_world_size_falls_back_to_disk_or_says_why() -> None:
    held = [[own(6, 0, 2, False)], [own(6, 1, 2, False)], []]
    plan = choose(held, 4, replicated=False)
    assert plan is not None
    assert plan.sources == (DISK,) * 3
    assert "cannot be resharded" in plan.note
    with pytest.raises(ReshardError, match="world of 2 ranks; this world has 3"):
        choose(held, None, replicated=False)


steps = st.integers(min_value=0, max_value=30)
snapshots = st.builds(Held, steps, st.just(0), st.just(3), st.just(True), st.booleans())


@given(st.lists(st.lists(snapshots, max_size=4), min_size=1, max_size=5), st.none() | steps)
def test_every_rank_gets_the_newest_step_reachable(held, disk) -> None:  # type: ignore[no-untyped-def]
    plan = choose(held, disk, replicated=True)
    newest = max([h.step for rank in held for h in rank] + ([disk] if disk is not None else []), default=None)
    if newest is None:
        assert plan is None
        return
    assert plan is not None
    assert plan.step == newest
    assert len(plan.sources) == len(held)
    for rank, source in enumerate(plan.sources):
        has = [h for h in held[rank] if h.step == plan.step]
        if source == MEMORY:
            assert any(not h.buddy for h in has)
        elif source == BUDDY:
            assert has
            assert all(h.buddy for h in has)
        elif source == PEER:
            assert not has
            (fetch,) = [f for f in plan.fetches if rank in f.to]
            assert any(h.step == plan.step for h in held[fetch.source])
        else:
            assert source == DISK
            assert set(plan.sources) == {DISK}
            assert plan.step == disk
