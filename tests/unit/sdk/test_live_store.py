"""Live mode's store, lost and back: a connection that reconnects (``_storelink``) and the rounds published again
in a store that came back empty (``_roundstore``), over a store server of the test's own (in memory, with
TCPStore's semantics for the operations the rounds use); and which members are known to have ended here."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from trainguard.pod import contract
from trainguard.pod.contract import LiveKeys
from trainguard.sdk import _rounds, _roundstore
from trainguard.sdk._rounds import Arrival, Formed, Staleness
from trainguard.sdk._roundstore import FINISH_WITHIN, RoundStore, ended_here, finish_within
from trainguard.sdk._storelink import Connection, Link, LiveError


class Lost(Exception):
    """The connection to the server is gone (torch's ``DistNetworkError``)."""


class Server:
    """A store's server: its keys, and its life (a restart starts it empty; earlier connections are lost)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.life = 0
        self.up = True
        self.lock = threading.Lock()

    def restart(self) -> None:
        with self.lock:
            self.data = {}
            self.life += 1

    def open(self, _seconds: float) -> Raw:
        if not self.up:
            raise Lost("connection refused")
        return Raw(self, self.life)


class Raw:
    """One connection to a ``Server`` (TCPStore's operations)."""

    def __init__(self, server: Server, life: int) -> None:
        self.server = server
        self.life = life
        self.timeout: Any = None

    def _data(self) -> dict[str, bytes]:
        if self.life != self.server.life or not self.server.up:
            raise Lost("Broken pipe")
        return self.server.data

    def set(self, key: str, value: str | bytes) -> None:
        with self.server.lock:
            if self.life != self.server.life:  # as TCPStore's: no answer, so nothing tells it was lost
                return
            self._data()[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        with self.server.lock:
            return self._data()[key]

    def check(self, keys: list[str]) -> bool:
        with self.server.lock:
            data = self._data()
            return all(key in data for key in keys)

    def add(self, key: str, amount: int) -> int:
        with self.server.lock:
            data = self._data()
            data[key] = str(int(data.get(key, b"0")) + amount).encode()
            return int(data[key])

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        with self.server.lock:
            data = self._data()
            if data.get(key, b"") == expected.encode():
                data[key] = desired.encode()
            return data[key] if key in data else expected.encode()

    def set_timeout(self, timeout: Any) -> None:
        self._data()
        self.timeout = timeout


class Client:
    """What ``_storelink.connect`` gives, without torch: each operation through a ``Connection``."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.connection = Connection(link, link.open_(1.0))

    def set(self, key: str, value: str) -> None:
        self.connection.set(key, value)

    def __getattr__(self, operation: str) -> Callable[..., Any]:
        return lambda *args: self.connection.call(operation, *args)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def link_to(server: Server, clock: Clock | None = None, within: float = 60.0) -> Link:
    if clock is None:
        return Link("store:29400", server.open, (Lost,), within=within, pause=0.01)
    return Link("store:29400", server.open, (Lost,), within=within, pause=0.5, clock=clock, sleep=clock.sleep)


# -- the connection ---------------------------------------------------------------------------------------


class Seen:
    def __init__(self) -> None:
        self.clients: list[Any] = []

    def hook(self, client: Any) -> None:
        self.clients.append(client)


def test_an_operation_whose_connection_was_lost_connects_again_and_is_retried() -> None:
    server = Server()
    link = link_to(server)
    seen = Seen()
    link.on_reconnect(seen.hook)
    client = Client(link)
    client.set("a", "1")
    server.restart()  # a new server on the same address: empty, every connection lost
    assert client.check(["a"]) is False
    client.set("a", "2")
    assert client.get("a") == b"2"
    assert link.generation == 1
    assert [c.life for c in seen.clients] == [1]  # told once, with the new connection


def test_a_set_into_a_connection_already_lost_is_made_again_on_the_next() -> None:
    server = Server()
    client = Client(link_to(server))
    server.restart()
    client.connection.set("gone/a", "1")
    assert server.open(1.0).get("gone/a") == b"1"
    assert client.link.generation == 1


def test_the_timeout_set_through_a_connection_holds_on_the_next() -> None:
    server = Server()
    client = Client(link_to(server))
    client.connection.timeout = 7
    server.restart()
    client.check(["a"])
    assert client.connection.client.timeout == 7


def test_a_store_that_does_not_come_back_within_the_bound_is_a_live_error() -> None:
    server, clock = Server(), Clock()
    link = link_to(server, clock, within=5.0)
    client = Client(link)
    server.up = False
    with pytest.raises(
        LiveError, match=r"lost the store at store:29400 and could not reach it again within 5 s"
    ):
        client.get("a")
    assert 5.0 <= clock.now < 5.0 + link.pause + 1e-9  # tried until the bound, not past it
    assert link.generation == 0


def test_a_store_back_within_the_bound_is_used_again() -> None:
    server, clock = Server(), Clock()
    link = link_to(server, clock, within=5.0)
    client = Client(link)
    server.up = False
    original = clock.sleep

    def back_after_two_seconds(seconds: float) -> None:
        original(seconds)
        if clock.now >= 2.0 and not server.up:
            server.restart()
            server.up = True

    link.sleep = back_after_two_seconds
    assert client.add("n", 1) == 1
    assert 2.0 <= clock.now < 3.0


def test_an_operations_own_error_is_not_a_lost_connection() -> None:
    server = Server()
    link = link_to(server)
    with pytest.raises(KeyError):
        Client(link).get("never-set")
    assert link.generation == 0


def test_what_is_told_of_reconnections_is_held_weakly() -> None:
    server = Server()
    link = link_to(server)
    seen = Seen()
    link.on_reconnect(seen.hook)
    del seen
    gc.collect()
    client = Client(link)
    server.restart()
    client.check(["a"])
    assert link.generation == 1
    assert link._hooks == []


# -- the rounds in a store that came back -------------------------------------------------------------------

KEYS = LiveKeys("t/")


def member(name: str) -> str:
    return contract.Member(name, 1, 100, 1, "").id  # no pid namespace: never taken for ended here


def join(store: RoundStore, n: int, held: int, minimum: int) -> Callable[[], Formed | None]:
    """``store.join`` in a thread of its own; what it returned, once it did."""
    got: list[Formed | None] = []
    thread = threading.Thread(target=lambda: got.append(store.join(n, held, minimum, 30.0, 30.0, 20.0)))
    thread.start()

    def result() -> Formed | None:
        thread.join(timeout=25)
        assert got, f"round {n} did not close for {store.member}"
        return got[0]

    return result


def two_in_round_one(server: Server) -> tuple[RoundStore, RoundStore]:
    a, b = (RoundStore(Client(link_to(server)), KEYS, member(x), 0.01) for x in "ab")
    first = [join(a, 1, -1, 2), join(b, 1, -1, 2)]
    assert [f() is not None for f in first] == [True, True]
    return a, b


def test_after_a_reconnection_a_member_publishes_its_round_again() -> None:
    server = Server()
    a, _b = two_in_round_one(server)
    assert a.formed is not None
    assert a.formed.round == 1
    server.restart()
    a.client.check([KEYS.latest()])  # any operation: a's connection is lost, it connects again
    raw = server.open(1.0)
    assert raw.get(KEYS.latest()) == b"1"
    assert Formed.loads(raw.get(KEYS.closed(1))) == a.formed


def test_publishing_again_never_lowers_the_latest_round_nor_replaces_a_record() -> None:
    server = Server()
    a, _ = two_in_round_one(server)
    raw = server.open(1.0)
    later = Formed(1, (member("c"),), 5, member("c"), ())
    raw.set(KEYS.closed(1), later.dumps())
    raw.set(KEYS.latest(), "4")
    a.publish_again(raw)
    assert raw.get(KEYS.latest()) == b"4"
    assert raw.get(KEYS.closed(1)) == later.dumps().encode()


def test_a_member_waiting_in_a_round_when_the_store_came_back_arrives_again() -> None:
    server = Server()
    a, b = two_in_round_one(server)
    waiting = join(a, 2, 10, 2)
    deadline = time.monotonic() + 20
    while KEYS.arrival(2, 0) not in server.data:  # a's arrival is in the store...
        assert time.monotonic() < deadline, "a did not arrive"
        time.sleep(0.01)
    server.restart()  # ...and lost with it
    assert server.open(1.0).check([KEYS.arrival(2, 0)]) is False
    other = join(b, 2, 10, 2)
    formed = waiting()
    assert formed is not None
    assert set(formed.members) == {a.member, b.member}
    assert other() == formed


def test_a_newcomer_in_a_round_the_store_forgot_goes_on_to_the_next() -> None:
    server = Server()
    a, b = two_in_round_one(server)
    second = [join(a, 2, 4, 2), join(b, 2, 4, 2)]
    assert [f() is not None for f in second] == [True, True]
    server.restart()
    newcomer = RoundStore(Client(link_to(server)), KEYS, member("c"), 0.01)
    assert newcomer.latest() == 0  # it reads the store before the survivors published their round again
    early = join(newcomer, 1, -1, 3)
    a.client.check([KEYS.latest()])  # a survivor's next operation publishes round 2 again
    assert early() is None  # round 1 is the store's earlier life's: it goes on
    assert [newcomer.forgotten(n) for n in (1, 2, 3)] == [True, False, False]
    assert newcomer.members_of(2) == (a.member, b.member)  # the round after waits for both, as ever


# -- members ended here ------------------------------------------------------------------------------------


def test_a_member_whose_process_ended_or_whose_pid_names_another_is_ended_here() -> None:
    me = contract.Member.of()
    assert not ended_here(me.id)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    named = contract.Member.of(child.pid)
    assert not ended_here(named.id)  # not yet reaped
    child.wait()
    assert ended_here(named.id)
    assert ended_here(replace(me, started=me.started + 1).id)  # its pid, used again by a later process


def test_a_member_of_another_pid_namespace_is_never_ended_here() -> None:
    # A pod on the host's network: the same host name, a pid namespace of its own where pid 1 is its worker.
    same_host = contract.Member(os.uname().nodename, 0, 999_999_999, 5, "0123456789abcdef")
    assert same_host.space != contract.pid_space()
    assert not ended_here(same_host.id)
    assert not ended_here(replace(same_host, space="").id)  # a namespace unknown: only its beats tell
    assert not ended_here("node-a:41")  # not a member's id


def test_two_pods_with_one_host_name_are_both_members() -> None:
    here = contract.Member.of()
    other = replace(here, space="f" * 16)  # the same host name, pod, pid and start: another pid namespace
    arrivals = [Arrival(here.id, 3), Arrival(other.id, 3)]
    absent = {m for m in (here.id, other.id) if ended_here(m)}
    formed = _rounds.close(2, (here.id, other.id), arrivals, absent, 2)
    assert formed is not None
    assert formed.members == (here.id, other.id)


def test_a_stale_incarnation_that_sees_its_replacement_in_the_rounds_stops() -> None:
    """Pod a's old incarnation (generation 1, on a node cut off) arrives in the round after the one its
    replacement (generation 2) formed with b: it is refused at once, and the round forms without it."""
    server = Server()
    old = RoundStore(Client(link_to(server)), KEYS, member("a"), 0.01)
    new = RoundStore(Client(link_to(server)), KEYS, contract.Member("a", 2, 7, 1, "").id, 0.01)
    b = RoundStore(Client(link_to(server)), KEYS, member("b"), 0.01)
    first = [join(new, 1, -1, 2), join(b, 1, -1, 2)]
    assert [f() is not None for f in first] == [True, True]
    with pytest.raises(LiveError, match="a stale one and stops"):
        old.join(2, 5, 1, 30.0, 30.0, 20.0)
    second = [join(new, 2, 5, 1), join(b, 2, 5, 1)]
    formed = [f() for f in second]
    assert all(f is not None and f.members == (new.member, b.member) for f in formed)


# -- the end of a run ----------------------------------------------------------------------------------------


def test_a_finished_member_waits_for_the_others_that_still_run() -> None:
    """A member whose run ended keeps its group until each other member of its round has finished, left it
    (gone, or silent for the stale time), or arrived in the next round."""
    server = Server()
    me = RoundStore(Client(link_to(server)), KEYS, member("a"), 0.01)
    others = {name: member(name) for name in "bcdef"}
    everyone = (me.member, *others.values())
    raw = server.open(1.0)
    staleness = Staleness(1.5)
    for m in everyone:
        raw.add(KEYS.beat(m), 1)
    assert me.still_running(4, everyone, staleness, 0.0) == list(others.values())
    raw.set(KEYS.finished(others["b"]), "100")
    raw.set(KEYS.gone(others["c"]), "1")
    RoundStore(Client(link_to(server)), KEYS, others["d"], 0.01).arrive(5, 99)
    for name in "bcdf":  # e beats no more
        raw.add(KEYS.beat(others[name]), 1)
    assert me.still_running(4, everyone, staleness, 1.0) == [others["e"], others["f"]]
    assert me.still_running(4, everyone, staleness, 1.6) == [others["f"]]  # e silent for 1.6 s
    raw.set(KEYS.finished(others["f"]), "100")
    assert me.still_running(4, everyone, staleness, 1.7) == []


def test_the_wait_at_the_end_ends_when_the_others_finish_or_at_its_bound() -> None:
    server = Server()
    me = RoundStore(Client(link_to(server)), KEYS, member("a"), 0.01)
    other = member("b")
    raw = server.open(1.0)
    raw.add(KEYS.beat(other), 1)
    started = time.monotonic()
    me.wait_while_running(4, (me.member, other), 30.0, 0.3)  # b beats on, never finishes: the bound ends it
    assert 0.3 <= time.monotonic() - started < 10
    raw.set(KEYS.finished(other), "100")
    started = time.monotonic()
    me.wait_while_running(4, (me.member, other), 30.0, 20.0)
    assert time.monotonic() - started < 10  # b finished: at once, far from the 20 s bound


@pytest.mark.parametrize(
    ("timeout", "within"),
    [(5.0, FINISH_WITHIN), (60.0, FINISH_WITHIN), (FINISH_WITHIN, FINISH_WITHIN), (600.0, 600.0)],
)
def test_at_the_end_a_member_that_beats_is_waited_for_past_the_collectives_bound(
    timeout: float, within: float
) -> None:
    """A slow member's last step can outlast a short bound on a loaded machine: it is waited for at least
    ``FINISH_WITHIN``, and for the bound where that is longer."""
    assert finish_within(timeout) == within


def test_at_the_end_a_member_whose_beats_pause_is_waited_for_until_it_finishes() -> None:
    """Beats can pause on a loaded machine while a member completes its last step: past the run's stale time
    (1.5 s) it is still waited for, and the wait ends once it finishes."""
    server = Server()
    me = RoundStore(Client(link_to(server)), KEYS, member("a"), 0.01)
    other = member("b")
    raw = server.open(1.0)
    raw.add(KEYS.beat(other), 1)  # and no beat since
    waiter = threading.Thread(
        target=me.wait_while_running, args=(4, (me.member, other), 1.5, 60.0), daemon=True
    )
    started = time.monotonic()
    waiter.start()
    waiter.join(1.5 * 2)
    assert waiter.is_alive(), f"the wait ended after {time.monotonic() - started:.1f} s of silence"
    raw.set(KEYS.finished(other), "100")
    waiter.join(10.0)
    assert not waiter.is_alive()


def test_at_the_end_a_member_silent_for_the_finish_stale_time_has_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_roundstore, "FINISH_STALE_AFTER", 0.5)
    server = Server()
    me = RoundStore(Client(link_to(server)), KEYS, member("a"), 0.01)
    other = member("b")
    server.open(1.0).add(KEYS.beat(other), 1)
    started = time.monotonic()
    me.wait_while_running(4, (me.member, other), 0.1, 60.0)  # the longer of the two: 0.5 s
    assert 0.5 <= time.monotonic() - started < 30
