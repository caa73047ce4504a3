"""Live mode's waits for the other members' keys while a round's groups are made (``ReconnectingStore``'s
``interrupted_by``), over a real TCPStore: torch's own calls (a ``PrefixStore`` over the client, as gloo makes
its group) end once the round is aborted, not at the store's bound."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

torch_distributed = pytest.importorskip("torch.distributed")

from trainguard.sdk._storelink import connect  # noqa: E402


@pytest.fixture
def client() -> Any:
    server = torch_distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    store = connect(f"127.0.0.1:{server.port}")
    yield store
    del store, server


def later(seconds: float, action: object) -> None:
    timer = threading.Timer(seconds, action)  # type: ignore[arg-type]
    timer.daemon = True
    timer.start()


@pytest.mark.parametrize("how", ["get", "wait", "prefixed get", "prefixed wait"])
def test_a_wait_for_a_key_ends_when_the_round_is_aborted(client: Any, how: str) -> None:
    ended = threading.Event()
    store: Any = torch_distributed.PrefixStore("round/5/", client) if how.startswith("prefixed") else client
    later(0.3, ended.set)
    started = time.monotonic()

    def wait() -> None:
        if how.endswith("get"):
            store.get("rank_2")
        else:
            store.wait(["rank_2"], timedelta(seconds=600))

    with client.interrupted_by(ended), pytest.raises(RuntimeError, match="round ended"):
        wait()
    assert 0.3 <= time.monotonic() - started < 10  # the store's own bound is 60 s, the wait's 600 s
    assert client.interrupt is None


def test_a_key_set_meanwhile_is_got_and_the_waits_bound_still_holds(client: Any) -> None:
    ended = threading.Event()
    later(0.2, lambda: client.set("rank_1", b"address"))
    with client.interrupted_by(ended):
        assert client.get("rank_1") == b"address"
        started = time.monotonic()
        with pytest.raises(torch_distributed.DistStoreError):
            client.wait(["rank_3"], timedelta(seconds=0.3))
        assert 0.3 <= time.monotonic() - started < 10


def test_outside_a_rounds_making_a_wait_is_the_stores_own(client: Any) -> None:
    ended = threading.Event()
    ended.set()  # an aborted round ends nothing outside its groups' making
    client.set("latest", b"4")
    assert client.get("latest") == b"4"
    with pytest.raises(torch_distributed.DistStoreError):
        client.wait(["nothing"], timedelta(seconds=0.2))
