"""Live mode's sharded states, decided (``trainguard.sdk._pairing``, ``trainguard.sdk._reshard``): each rank's
buddy, the rows each rank holds, the newest step held whole, and who sends which rows to whom; and what a member
says when the state cannot be formed from memory (``trainguard.sdk._sharded``)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.sdk._pairing import buddy_of, no_buddy_elsewhere, wards_of
from trainguard.sdk._reshard import Choice, Held, Shortfall, choose, pieces, rows, shortfall, slots
from trainguard.sdk._roundstore import LiveError


@pytest.mark.parametrize(
    ("n", "world", "expected"),
    [
        (7, 4, [(0, 2), (2, 4), (4, 6), (6, 7)]),  # FSDP2's chunks: ceil(7/4) = 2 rows each, the last short
        (3, 4, [(0, 1), (1, 2), (2, 3), (3, 3)]),  # the last rank holds none
        (8, 3, [(0, 3), (3, 6), (6, 8)]),
        (5, 1, [(0, 5)]),
        (0, 2, [(0, 0), (0, 0)]),
    ],
)
def test_each_rank_holds_fsdp2s_chunk_of_the_rows(
    n: int, world: int, expected: list[tuple[int, int]]
) -> None:
    assert [rows(n, world, i) for i in range(world)] == expected


@given(st.integers(0, 300), st.integers(1, 17))
def test_the_chunks_tile_the_rows_in_order(n: int, world: int) -> None:
    chunks = [rows(n, world, i) for i in range(world)]
    assert chunks[0][0] == 0
    assert chunks[-1][1] == n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(chunks))
    assert all(start <= stop for start, stop in chunks)


@pytest.mark.parametrize(
    ("nodes", "buddies", "why"),
    [
        (["a"], [None], "a world of 1"),
        (["a", "b", "c", "d"], [1, 2, 3, 0], None),
        (
            ["a", "a", "b", "b"],
            [2, 2, 0, 0],
            None,
        ),  # the next rank on another node: uneven, rank 1 keeps none
        (["a", "a", "a"], [1, 2, 0], "every member is on a"),
        (["a", "b", "b"], [1, 0, 0], None),
    ],
)
def test_a_ranks_buddy_is_the_next_rank_on_another_node(
    nodes: list[str], buddies: list[int | None], why: str | None
) -> None:
    assert [buddy_of(rank, nodes) for rank in range(len(nodes))] == buddies
    said = no_buddy_elsewhere(nodes)
    assert (said is None) == (why is None)
    assert why is None or (said is not None and why in said)


@given(st.lists(st.sampled_from("abc"), min_size=2, max_size=9))
def test_every_rank_has_a_buddy_elsewhere_when_there_is_an_elsewhere_and_its_wards_are_its_inverse(
    nodes: list[str],
) -> None:
    for rank in range(len(nodes)):
        buddy = buddy_of(rank, nodes)
        assert buddy is not None
        assert buddy != rank
        if len(set(nodes)) > 1:
            assert nodes[buddy] != nodes[rank]
        assert rank in wards_of(buddy, nodes)
    assert sorted(w for rank in range(len(nodes)) for w in wards_of(rank, nodes)) == list(range(len(nodes)))
    assert (no_buddy_elsewhere(nodes) is None) == (len(set(nodes)) > 1)


def _own(round_: int, world: int, index: int, step: int) -> Held:
    return Held(round_, world, index, step, True)


def _ward(round_: int, world: int, index: int, step: int) -> Held:
    return Held(round_, world, index, step, False)


@pytest.mark.parametrize(
    ("inventories", "expected"),
    [
        # nobody holds anything (the job's start)
        ([[], [], []], None),
        # rank 1 of 3 lost: its shard from its buddy (rank 2, now the new round's member 1)
        (
            [[_own(4, 3, 0, 9), _ward(4, 3, 2, 9)], [_own(4, 3, 2, 9), _ward(4, 3, 1, 9)], []],
            Choice(4, 3, 9, ((0,), (1,), (1, 0)), 0),
        ),
        # the owner preferred over a buddy; the newest step held whole, not the newest held in part
        (
            [
                [_own(4, 2, 0, 9), _ward(4, 2, 1, 9), _own(4, 2, 0, 10)],
                [_own(4, 2, 1, 9), _ward(4, 2, 0, 9)],
            ],
            Choice(4, 2, 9, ((0, 1), (1, 0)), 0),
        ),
        # the newest round at a step held whole in two shardings (a round formed, its first copies made)
        (
            [[_own(4, 2, 0, 9), _ward(4, 2, 1, 9), _own(5, 1, 0, 9)], [_own(4, 2, 1, 9)]],
            Choice(5, 1, 9, ((0,),), 0),
        ),
        # a shard with no holder: none
        ([[_own(4, 3, 0, 9)], [_own(4, 3, 1, 9)]], None),
        # only buddies' copies: nobody keeps the state's other parts
        ([[_ward(4, 1, 0, 9)]], None),
    ],
)
def test_the_newest_step_held_whole_is_chosen(inventories: list[list[Held]], expected: Choice | None) -> None:
    assert choose(inventories) == expected


@given(
    st.lists(st.sampled_from("abcd"), min_size=1, max_size=8).flatmap(
        lambda nodes: st.tuples(
            st.just(nodes), st.sets(st.integers(0, len(nodes) - 1), min_size=1), st.integers(0, 2)
        )
    )
)
def test_the_state_is_held_whole_exactly_when_every_shard_keeps_its_owner_or_its_buddy(
    lost: tuple[list[str], set[int], int],
) -> None:
    nodes, survivors, newcomers = lost
    world = len(nodes)

    def held(rank: int) -> list[Held]:
        wards = [_ward(3, world, ward, 40) for ward in wards_of(rank, nodes)]
        return [
            _own(3, world, rank, 40),
            *wards,
            _own(3, world, rank, 39),
        ]  # the last step's, not yet dropped

    order = sorted(survivors)
    inventories = [held(rank) for rank in order] + [[] for _ in range(newcomers)]
    kept = {i for i in range(world) if i in survivors or buddy_of(i, nodes) in survivors}
    choice = choose(inventories)
    if kept != set(range(world)):
        assert choice is None
        short = shortfall(inventories)
        assert short is not None
        assert set(short.missing) == set(range(world)) - kept
        return
    assert choice is not None
    assert (choice.round, choice.world, choice.step) == (3, world, 40)
    for index, holders in enumerate(choice.holders):
        if index in survivors:
            assert holders[0] == order.index(index)  # the owner first
        assert all(index == order[h] or index in wards_of(order[h], nodes) for h in holders)


def test_a_shortfall_names_the_shards_without_a_holder() -> None:
    assert shortfall([[], []]) is None
    inventories = [[_own(4, 4, 0, 9), _ward(4, 4, 3, 9), _own(4, 4, 0, 8)], [_own(4, 4, 3, 9)]]
    assert shortfall(inventories) == Shortfall(4, 4, 9, (1, 2))


@pytest.mark.parametrize(
    ("owned", "expected"),
    [
        # rank 1 of 4 lost, its replacement (the newcomer, last in the round's order) takes its slot
        ([0, 2, 3, None], [0, 2, 3, 1]),
        # rank 2 of 4 lost, no replacement: the owner of rank 3 takes the free slot 2
        ([0, 1, 3], [0, 1, 2]),
        # the last rank lost: its replacement takes the last slot
        ([0, 1, 2, None], [0, 1, 2, 3]),
        # nobody holds anything: the round's order
        ([None, None], [0, 1]),
    ],
)
def test_each_member_keeps_the_slot_of_the_shard_it_owns(
    owned: list[int | None], expected: list[int]
) -> None:
    world = 4 if len(owned) > 2 else 1
    inventories = [[_own(2, world, i, 8)] if i is not None else [] for i in owned]
    if owned[0] is not None:  # the first member also keeps every other rank's copy: the state is whole
        inventories[0] += [_ward(2, world, i, 8) for i in range(world) if i != owned[0]]
    assert slots(inventories, choose(inventories)) == expected


@given(
    st.integers(1, 7).flatmap(
        lambda old: st.tuples(st.just(old), st.permutations(range(old)), st.integers(0, 3))
    )
)
def test_slots_are_a_permutation_that_keeps_every_owner_it_can(shuffle: tuple[int, list[int], int]) -> None:
    old, order, newcomers = shuffle
    survivors = order[: max(1, len(order) - 2)]  # some lost, in any order
    inventories = [[_own(2, old, i, 8), _ward(2, old, (i + 1) % old, 8)] for i in survivors]
    inventories += [[] for _ in range(newcomers)]
    choice = choose(inventories)
    got = slots(inventories, choice)
    assert sorted(got) == list(range(len(inventories)))
    if choice is not None:
        for member, index in enumerate(survivors):
            if index < len(inventories):
                assert got[member] == index


@st.composite
def _resizes(draw: st.DrawFn) -> tuple[list[int], Choice, int]:
    old = draw(st.integers(1, 6))
    new = draw(st.integers(1, 6))
    holders = tuple(
        tuple(draw(st.lists(st.integers(0, new - 1), min_size=1, max_size=3, unique=True)))
        for _ in range(old)
    )
    lengths = draw(st.lists(st.integers(0, 40), min_size=1, max_size=4))
    return lengths, Choice(1, old, 5, holders, holders[0][0]), new


@given(_resizes())
def test_each_member_receives_exactly_its_new_rows_from_holders_of_them(
    resize: tuple[list[int], Choice, int],
) -> None:
    lengths, choice, world = resize
    planned = pieces(lengths, choice, world)
    for leaf, n in enumerate(lengths):
        for target in range(world):
            mine = sorted((p.start, p.stop) for p in planned if p.leaf == leaf and p.target == target)
            start, stop = rows(n, world, target)
            covered = [row for a, b in mine for row in range(a, b)]
            assert covered == list(range(start, stop))
    for piece in planned:
        assert piece.source in choice.holders[piece.old]
        old_start, old_stop = rows(lengths[piece.leaf], choice.world, piece.old)
        assert old_start <= piece.start < piece.stop <= old_stop
        if piece.target in choice.holders[piece.old]:
            assert piece.source == piece.target  # what a member holds, it takes from itself


@given(st.integers(1, 6), st.lists(st.integers(0, 40), min_size=1, max_size=4))
def test_the_same_world_with_every_owner_in_place_moves_nothing(world: int, lengths: list[int]) -> None:
    choice = Choice(1, world, 5, tuple((i,) for i in range(world)), 0)
    assert all(p.source == p.target for p in pieces(lengths, choice, world))


def test_a_state_held_in_part_falls_back_to_restore_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    from trainguard.sdk._sharded import Sharded

    sharded = Sharded(lambda mesh: {})
    lost = [[_own(3, 4, 0, 20)], [_own(3, 4, 1, 20)]]  # ranks 2 and 3 lost, each with its buddy
    assert sharded._fall_back(4, lost, lambda: (18, "disk")) == ("disk", 0, 18)
    err = capsys.readouterr().err
    assert "the shards of ranks [2, 3] of round 3 (a world of 4) at step 20 have no holder" in err
    assert "falling back to Live(restore=...)" in err
    assert "restored by Live(restore=...) from disk at step 18" in err
    with pytest.raises(LiveError, match="no restore= to load a snapshot or checkpoint"):
        sharded._fall_back(4, lost, None)
    with pytest.raises(LiveError, match="found nothing to load"):
        sharded._fall_back(4, lost, lambda: None)
    assert "falling back to Live(restore=...)" in capsys.readouterr().err
    # Nobody holding anything is the job's start: the state as built, or restored.
    assert sharded._fall_back(1, [[], []], None) == ("fresh", 0, None)
    assert sharded._fall_back(1, [[], []], lambda: (7, "memory")) == ("memory", 0, 7)
    assert capsys.readouterr().err == ""


def test_members_all_on_one_pod_are_warned_once(capsys: pytest.CaptureFixture[str]) -> None:
    from trainguard.sdk._sharded import Sharded

    sharded = Sharded(lambda mesh: {})
    sharded._pair(1, 3, 0, ["p", "p", "p"])
    assert (sharded.buddy, sharded.wards) == (1, [2])
    sharded._pair(2, 3, 0, ["p", "p", "p"])
    err = capsys.readouterr().err
    assert err.count("no buddy on another pod (every member is on p") == 1, err
    sharded._pair(3, 2, 0, ["p", "q"])
    assert capsys.readouterr().err == ""


def test_a_packed_state_filled_into_objects_built_anew_trains_on_as_the_original() -> None:
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from trainguard.sdk import _sharded

    def build(mesh: object) -> dict[str, object]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 7), torch.nn.Linear(7, 3))
        for layer in model:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return {"model": model, "optimizer": torch.optim.Adam(model.parameters(), lr=0.1)}

    def step(state: dict[str, object]) -> None:
        state["model"](torch.ones(2, 4)).square().sum().backward()  # type: ignore[operator]
        state["optimizer"].step()  # type: ignore[attr-defined]
        state["optimizer"].zero_grad()  # type: ignore[attr-defined]

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        mesh = init_device_mesh("cpu", (1,))
        first = build(mesh)
        step(first)
        skeleton, data, leaves = _sharded._pack(first, 1, 0)
        assert [leaf.shape for leaf in leaves[:4]] == [(7, 4), (7,), (3, 7), (3,)]
        assert data.numel() == 3 * sum(leaf.row_bytes * leaf.shape[0] for leaf in leaves[:4])  # + Adam's 2
        again = build(mesh)
        news = [
            data[o : o + _sharded._span(leaf, 1, 0)]
            for o, leaf in zip(_sharded._offsets(leaves, 1, 0), leaves, strict=True)
        ]
        _sharded._load(again, _sharded._fill(skeleton, [n.clone() for n in news], leaves, mesh))
        step(first)
        step(again)
        for a, b in zip(first["model"].parameters(), again["model"].parameters(), strict=True):  # type: ignore[attr-defined]
            assert torch.equal(a.to_local(), b.to_local())
        # The kept copy is its own: the objects' steps change nothing in it (Adam's step count included).
        assert skeleton["optimizer"]["state"][0]["step"].item() == 1.0
    finally:
        dist.destroy_process_group()
