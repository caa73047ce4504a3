"""ElasticSampler: each epoch is one permutation, dealt out so that resizes never repeat or skip a sample."""

from __future__ import annotations

from collections import Counter
from itertools import islice
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.sdk.sampler import ElasticSampler

torch = pytest.importorskip("torch")


def run_segment(
    state: dict[str, Any] | None, n: int, world: int, batch: int, steps: int | None, shuffle: bool, seed: int
) -> tuple[list[list[int]], dict[str, Any]]:
    """A job of ``world`` ranks resumed from ``state``, training ``steps`` steps (None: to the epoch's end).

    Returns what each rank consumed and the checkpointed sampler state (rank 0's, as the Checkpointer saves).
    """
    samplers = [ElasticSampler(n, shuffle=shuffle, seed=seed, rank=r, world_size=world) for r in range(world)]
    for sampler in samplers:
        if state is not None:
            sampler.load_state_dict(state)
    iterators = [iter(sampler) for sampler in samplers]
    seen: list[list[int]] = [[] for _ in range(world)]
    step = 0
    while steps is None or step < steps:
        batches = [list(islice(iterator, batch)) for iterator in iterators]
        if not any(batches):
            break
        for rank, taken in enumerate(batches):
            seen[rank].extend(taken)
        for sampler in samplers:
            sampler.advance(sum(len(taken) for taken in batches))
        step += 1
    return seen, samplers[0].state_dict()


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(0, 200),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**31),
    batch=st.integers(1, 9),
    segments=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 12)), max_size=4),
    last_world=st.integers(1, 8),
)
def test_across_any_resizes_every_sample_of_the_epoch_is_seen_exactly_once(
    n: int,
    shuffle: bool,
    seed: int,
    batch: int,
    segments: list[tuple[int, int]],
    last_world: int,
) -> None:
    state: dict[str, Any] | None = None
    seen: list[int] = []
    for world, steps in [*segments, (last_world, None)]:
        per_rank, state = run_segment(state, n, world, batch, steps, shuffle, seed)
        seen.extend(index for indices in per_rank for index in indices)
        # A segment's ranks get equal shares, give or take the one sample of the remainder.
        counts = [len(indices) for indices in per_rank]
        assert max(counts) - min(counts) <= 1
    assert sorted(seen) == list(range(n))
    assert state is not None
    assert state["consumed"] == n


@settings(max_examples=100, deadline=None)
@given(n=st.integers(0, 100), world=st.integers(1, 6), consumed=st.integers(0, 100))
def test_len_is_what_this_rank_yields(n: int, world: int, consumed: int) -> None:
    for rank in range(world):
        sampler = ElasticSampler(n, seed=1, rank=rank, world_size=world)
        sampler.advance(consumed)
        assert len(sampler) == len(list(sampler))


def test_the_epoch_order_is_fixed_by_seed_and_epoch() -> None:
    def order(seed: int, epoch: int) -> list[int]:
        sampler = ElasticSampler(100, seed=seed, rank=0, world_size=1)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert order(3, 1) == order(3, 1)
    assert order(3, 1) != order(3, 2)
    assert order(3, 1) != order(4, 1)
    assert sorted(order(3, 1)) == list(range(100))
    assert list(ElasticSampler(10, shuffle=False, rank=0, world_size=1)) == list(range(10))


def test_set_epoch_keeps_the_progress_of_the_epoch_in_progress_and_resets_for_a_new_one() -> None:
    sampler = ElasticSampler(10, rank=0, world_size=1)
    sampler.set_epoch(2)
    sampler.advance(4)

    sampler.set_epoch(2)  # the training loop's `for epoch in range(start, ...)` after a resume
    assert sampler.consumed == 4
    sampler.set_epoch(3)
    assert (sampler.epoch, sampler.consumed) == (3, 0)


def test_progress_stops_at_the_end_of_the_epoch() -> None:
    sampler = ElasticSampler(10, rank=0, world_size=1)
    sampler.advance(8)
    sampler.advance(8)
    assert sampler.consumed == 10
    assert list(sampler) == []


def test_a_resumed_sampler_continues_the_saved_epoch() -> None:
    before = ElasticSampler(50, seed=7, rank=0, world_size=1)
    before.set_epoch(4)
    order = list(before)
    before.advance(20)

    after = ElasticSampler(50, seed=7, rank=0, world_size=1)
    after.load_state_dict(before.state_dict())

    assert after.epoch == 4
    assert list(after) == order[20:]


@pytest.mark.parametrize(
    ("key", "value"),
    [("dataset_len", 51), ("seed", 8), ("shuffle", False)],
    ids=["length", "seed", "shuffle"],
)
def test_a_state_from_another_order_is_refused_with_the_fix(key: str, value: Any) -> None:
    state = ElasticSampler(50, seed=7, rank=0, world_size=1).state_dict()
    state[key] = value
    with pytest.raises(ValueError, match=rf"checkpoint has {key}=.*Construct the sampler with {key}="):
        ElasticSampler(50, seed=7, rank=0, world_size=1).load_state_dict(state)


def test_rank_and_world_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    sampler = ElasticSampler(9, shuffle=False)
    assert (sampler.rank, sampler.world_size) == (2, 3)
    assert list(sampler) == [2, 5, 8]


@pytest.mark.parametrize(("rank", "world"), [(3, 3), (-1, 2), (0, 0)])
def test_a_rank_outside_the_world_is_refused(rank: int, world: int) -> None:
    with pytest.raises(ValueError, match="is not in a world of size"):
        ElasticSampler(9, rank=rank, world_size=world)


def test_it_drives_a_dataloader_and_resumes_mid_epoch_in_a_smaller_world() -> None:
    from torch.utils.data import DataLoader

    data = list(range(23))
    seen: Counter[int] = Counter()
    # Three ranks train two steps of batch 2 (12 samples), then the job continues with two ranks.
    loaders = []
    for rank in range(3):
        sampler = ElasticSampler(len(data), seed=5, rank=rank, world_size=3)
        loaders.append((sampler, iter(DataLoader(data, batch_size=2, sampler=sampler))))
    for _ in range(2):
        for sampler, loader in loaders:
            seen.update(next(loader).tolist())
            sampler.advance(2 * 3)
    state = loaders[0][0].state_dict()
    for rank in range(2):
        sampler = ElasticSampler(len(data), seed=5, rank=rank, world_size=2)
        sampler.load_state_dict(state)
        for batch in DataLoader(data, batch_size=2, sampler=sampler):
            seen.update(batch.tolist())

    assert seen == Counter(data)


@pytest.mark.parametrize(("epoch", "consumed"), [(0, 0), (1, 24), (3, 48)])
def test_seek_stands_where_the_agreed_step_is_whatever_was_advanced(epoch: int, consumed: int) -> None:
    moved = ElasticSampler(48, seed=3, rank=1, world_size=2)
    moved.advance(30)  # a step this process took that the round did not agree on
    moved.seek(epoch, consumed)
    fresh = ElasticSampler(48, seed=3, rank=1, world_size=2)
    fresh.set_epoch(epoch)
    fresh.advance(consumed)
    assert list(moved) == list(fresh)
    assert (moved.epoch, moved.consumed) == (epoch, consumed)


@pytest.mark.parametrize(("epoch", "consumed"), [(0, -1), (0, 49), (-1, 0)])
def test_seek_outside_the_epoch_is_refused(epoch: int, consumed: int) -> None:
    with pytest.raises(ValueError, match="consumed must be 0-48"):
        ElasticSampler(48, rank=0, world_size=1).seek(epoch, consumed)


def test_even_batches_is_what_the_last_rank_holds_the_case_seen_in_live_mode() -> None:
    """1,437 samples, 14 steps of 66 into the epoch (924 consumed), then a world of 2 with batches of 32: the
    513 left split 257/256, 9 and 8 batches. Every rank takes 8."""
    samplers = [ElasticSampler(1437, rank=r, world_size=2) for r in range(2)]
    for sampler in samplers:
        sampler.advance(924)
    assert [-(-len(s) // 32) for s in samplers] == [9, 8]
    assert [s.even_batches(32) for s in samplers] == [8, 8]
    with pytest.raises(ValueError, match="at least 1"):
        samplers[0].even_batches(0)


@given(
    st.integers(min_value=0, max_value=500),
    st.integers(min_value=1, max_value=8),
    st.integers(min_value=1, max_value=40),
    st.data(),
)
def test_even_batches_is_the_same_on_every_rank_and_at_most_one_sample_short(
    n: int, world: int, batch: int, data: st.DataObject
) -> None:
    consumed = data.draw(st.integers(min_value=0, max_value=n))
    samplers = [ElasticSampler(n, rank=r, world_size=world) for r in range(world)]
    for sampler in samplers:
        sampler.advance(consumed)
    counts = {s.even_batches(batch) for s in samplers}
    assert len(counts) == 1
    (even,) = counts
    for sampler in samplers:
        taken = sum(len(b) for b in islice(_batches(list(sampler), batch), even))
        assert len(sampler) - 1 <= taken <= len(sampler)


def _batches(indices: list[int], batch: int) -> list[list[int]]:
    return [indices[i : i + batch] for i in range(0, len(indices), batch)]
