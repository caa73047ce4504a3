"""Live mode's state transfer, its pure parts: a state dict split into a skeleton and tensors and filled
again, the buckets, and the connections of a group found and shut down."""

from __future__ import annotations

import pickle
import socket
import threading

import pytest

from trainguard.sdk import _sockets
from trainguard.sdk._transfer import Placeholder, buckets, fill, placeholders, split

torch = pytest.importorskip("torch")


def test_a_state_dict_splits_into_a_skeleton_and_its_tensors_and_fills_back() -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "note": ("x", [1, 2])}
    tensors: list = []
    skeleton = split(state, tensors)
    body = pickle.dumps(skeleton)  # no tensor in it: the store carries it
    assert b"torch._utils" not in body
    slots = placeholders(pickle.loads(body))
    assert [p.index for p in slots] == list(range(len(tensors)))
    assert all(
        p.shape == tuple(t.shape) and p.dtype == str(t.dtype) for p, t in zip(slots, tensors, strict=True)
    )
    again = fill(skeleton, tensors)
    assert again["note"] == ("x", [1, 2])
    assert torch.equal(again["model"]["weight"], model.weight)
    assert again["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]


@pytest.mark.parametrize(
    ("sizes", "limit", "expected"),
    [
        ([(0, "f32", 10), (1, "f32", 10), (2, "f32", 10)], 25, [[0, 1], [2]]),
        ([(0, "f32", 10), (1, "i64", 10), (2, "f32", 10)], 100, [[0, 2], [1]]),  # one dtype a bucket
        ([(0, "f32", 500), (1, "f32", 10)], 100, [[0], [1]]),  # a tensor larger than the limit: alone
        ([], 100, []),
    ],
)
def test_buckets_hold_one_dtype_and_at_most_the_limit(
    sizes: list[tuple[int, str, int]], limit: int, expected: list[list[int]]
) -> None:
    assert buckets(sizes, limit) == expected


def test_a_placeholder_knows_whether_its_tensor_was_on_a_device() -> None:
    tensors: list = []
    assert split(torch.zeros(2, 3), tensors) == Placeholder(0, (2, 3), "torch.float32", False)


def test_shutting_a_groups_connections_ends_a_blocked_read_and_spares_its_listener() -> None:
    before = _sockets.sockets()
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    owned = _sockets.opened_since(before)
    assert {listener.fileno(), client.fileno(), server.fileno()} <= owned.keys()
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(server.recv(10)))
    reader.start()
    assert _sockets.shut_down(owned) == 2  # the two ends of the connection, not the listener
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert got == [b""]
    assert listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
    for s in (client, server, listener):
        s.close()
    assert _sockets.shut_down(owned) == 0  # closed since: nothing left to shut


def test_a_state_goes_whole_through_a_transfer_of_many_buckets_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sender and a receiver (two threads, a gloo group of several streams): more buckets than fit in flight,
    several dtypes, tensors larger than a bucket, an optimizer's host-side scalars; every tensor arrives
    equal, in a storage of its own."""
    import datetime

    import torch.distributed as dist

    from trainguard.sdk import _transfer

    monkeypatch.setattr(_transfer, "BUCKET_BYTES", 256)
    model = torch.nn.Sequential(torch.nn.Linear(40, 30), torch.nn.Linear(30, 5))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 40)).sum().backward()
    optimizer.step()
    extra = {"ints": torch.arange(3000, dtype=torch.int64), "half": torch.ones(700, dtype=torch.bfloat16)}
    state = {"model": model, "optimizer": optimizer, "extra": _Holder(extra)}
    body, tensors = _transfer.skeleton_of(state)
    sizes = [
        (i, _transfer._kind(str(t.dtype), False), t.numel() * t.element_size()) for i, t in enumerate(tensors)
    ]
    assert len(_transfer.buckets(sizes)) > _transfer.WINDOW_PER_STREAM * _transfer.streams()
    store = dist.HashStore()
    timeout = datetime.timedelta(seconds=30)
    results: dict[str, object] = {}

    def side(rank: int) -> None:
        group = dist.ProcessGroupGloo(store, rank, 2, _transfer.group_options(timeout))
        if rank == 0:
            results["sent"] = _transfer.send(group, tensors)
        else:
            results["received"] = _transfer.receive(group, body, torch.device("cpu"))

    threads = [threading.Thread(target=side, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    dicts, received = results["received"]  # type: ignore[misc]
    assert received == results["sent"] == sum(t.numel() * t.element_size() for t in tensors)
    for name in ("model", "optimizer"):
        mine = state[name].state_dict()
        _assert_equal(dicts[name], mine)
    _assert_equal(dicts["extra"], extra)
    storages = {t.untyped_storage().data_ptr() for t in _tensors_of(dicts)}
    assert len(storages) == len(tensors)


class _Holder:
    def __init__(self, tensors: dict) -> None:
        self.tensors = tensors

    def state_dict(self) -> dict:
        return self.tensors


def _tensors_of(obj: object) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for value in obj.values() for t in _tensors_of(value)]
    if isinstance(obj, list | tuple):
        return [t for value in obj for t in _tensors_of(value)]
    return []


def _assert_equal(got: object, expected: object) -> None:
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert got.dtype == expected.dtype
        assert got.shape == expected.shape
        assert torch.equal(got, expected)
    elif isinstance(expected, dict):
        assert isinstance(got, dict)
        assert got.keys() == expected.keys()
        for key in expected:
            _assert_equal(got[key], expected[key])
    elif isinstance(expected, list | tuple):
        assert isinstance(got, list | tuple)
        assert len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            _assert_equal(a, b)
    else:
        assert got == expected


def test_two_senders_deal_the_buckets_and_the_receiver_gets_them_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two members hold the state: each sends every other bucket; the receiver's state is whole."""
    import datetime

    import torch.distributed as dist

    from trainguard.sdk import _transfer

    monkeypatch.setattr(_transfer, "BUCKET_BYTES", 256)
    model = torch.nn.Sequential(torch.nn.Linear(20, 10), torch.nn.Linear(10, 3))
    state = {"model": model}
    body, tensors = _transfer.skeleton_of(state)
    store = dist.HashStore()
    timeout = datetime.timedelta(seconds=30)
    results: dict[int, object] = {}

    def side(rank: int) -> None:
        group = dist.ProcessGroupGloo(store, rank, 3, _transfer.group_options(timeout, 2))
        if rank < 2:
            results[rank] = _transfer.send(group, tensors, 2, rank)
        else:
            results[rank] = _transfer.receive(group, body, torch.device("cpu"), 2)

    threads = [threading.Thread(target=side, args=(rank,)) for rank in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    dicts, received = results[2]  # type: ignore[misc]
    total = sum(t.numel() * t.element_size() for t in tensors)
    assert received == total
    assert results[0]
    assert results[1]
    assert results[0] + results[1] == total  # type: ignore[operator]
    _assert_equal(dicts["model"], model.state_dict())


@pytest.mark.parametrize(
    ("sizes", "senders", "expected"),
    [
        ([10, 10, 10, 10], 2, [0, 1, 0, 1]),
        ([100, 10, 10, 10], 2, [0, 1, 1, 1]),  # the big bucket alone, the small ones to the other
        ([5, 5], 1, [0, 0]),
        ([], 3, []),
    ],
)
def test_the_buckets_are_dealt_so_that_the_senders_shares_are_about_even(
    sizes: list[int], senders: int, expected: list[int]
) -> None:
    from trainguard.sdk._transfer import deal

    assert deal(sizes, senders) == expected
