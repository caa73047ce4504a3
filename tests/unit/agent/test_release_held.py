"""A released address held for a while (``trainguard.agent.release.Held``): which connection attempts to it are
due to be shut down, read from a namespace's /proc/net/tcp (a fake one here); the shutting down itself is
tested on real sockets in tests/integration/agent/test_agent_release.py."""

from __future__ import annotations

from pathlib import Path

from trainguard.agent.release import (
    HOLD_SECONDS,
    UNANSWERED_SECONDS,
    Held,
    in_lost_round,
)
from trainguard.agent.sockets import read_connections, socket_inodes

_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
#: 10.0.0.5 and 10.0.0.6 as /proc/net/tcp writes them (little-endian hex), port 22 (0016).
LOST, OTHER = "10.0.0.5", "10.0.0.6"
_HEX = {LOST: "0500000A", OTHER: "0600000A"}


def _proc(tmp_path: Path, *sockets: tuple[str, str, int], local: str = "0200000A") -> str:
    """A /proc whose net/tcp lists ``sockets``: (remote address, state, inode), from ``local`` (10.0.0.2)."""
    (tmp_path / "net").mkdir(exist_ok=True)
    lines = [
        f"   {i}: {local}:9C40 {_HEX[address]}:0016 {state} 00000000:00000000 01:00000064 00000001     0        0 "
        f"{inode} 1 0000000000000000 100 0 0 10 0\n"
        for i, (address, state, inode) in enumerate(sockets)
    ]
    (tmp_path / "net" / "tcp").write_text(_HEADER + "".join(lines))
    return str(tmp_path)


def test_socket_inodes_by_state(tmp_path: Path) -> None:
    proc = _proc(tmp_path, (LOST, "01", 11), (LOST, "02", 12), (OTHER, "02", 13), (LOST, "0A", 14))
    assert socket_inodes((LOST,), proc) == {11, 12}  # a listening socket is nobody's connection
    assert socket_inodes((LOST,), proc, frozenset({"02"})) == {12}


def test_one_read_of_the_tables_answers_every_question(tmp_path: Path) -> None:
    """A release asks the tables several questions (the lost pod's sockets, whether this pod is still in its
    round, the peers'); one read answers them all as the read found them."""
    proc = _proc(tmp_path, (LOST, "01", 51), (OTHER, "01", 52))
    rows = read_connections(proc)
    assert {row.inode for row in rows} == {51, 52}
    assert in_lost_round((LOST,), (OTHER,), connections=rows)
    _proc(tmp_path, (LOST, "01", 51), (OTHER, "08", 52))  # the peer left the round: its end closed
    assert not in_lost_round((LOST,), (OTHER,), proc)  # read again: seen
    assert in_lost_round((LOST,), (OTHER,), connections=rows)  # the earlier read: as it was
    assert socket_inodes((OTHER,), states=frozenset({"01"}), connections=rows) == {52}


def test_a_pods_connections_to_itself_are_not_to_others(tmp_path: Path) -> None:
    rows = read_connections(_proc(tmp_path, (OTHER, "01", 61), local=_HEX[OTHER]))
    assert socket_inodes((OTHER,), connections=rows) == {61}
    assert socket_inodes((OTHER,), to_others=True, connections=rows) == set()


def test_an_attempt_is_due_once_unanswered_long_enough(tmp_path: Path) -> None:
    proc = _proc(tmp_path, (LOST, "02", 21), (OTHER, "02", 22), (LOST, "01", 23))
    held = Held(proc)
    assert held.unanswered(0.0) == set()  # nothing held: nothing read
    held.hold((LOST,), 100.0)
    assert held.addresses == (LOST,)
    assert held.unanswered(100.0) == set()  # first seen now: it may be answered in a moment
    assert held.unanswered(100.0 + UNANSWERED_SECONDS / 2) == set()
    # Still an attempt a second later: nobody there. Another address's attempt, and a connection to the held
    # address that was answered (a new pod that got it), are not the hold's.
    assert held.unanswered(100.0 + UNANSWERED_SECONDS) == {21}


def test_an_attempt_answered_meanwhile_is_forgotten(tmp_path: Path) -> None:
    held = Held(_proc(tmp_path, (LOST, "02", 31)))
    held.hold((LOST,), 0.0)
    assert held.unanswered(0.0) == set()
    _proc(tmp_path, (LOST, "01", 31))  # answered: established
    assert held.unanswered(UNANSWERED_SECONDS) == set()
    _proc(tmp_path, (LOST, "02", 32))  # a new attempt: its own second
    assert held.unanswered(UNANSWERED_SECONDS + 0.5) == set()
    assert held.unanswered(2 * UNANSWERED_SECONDS + 0.5) == {32}


def test_an_address_is_held_for_a_while_then_let_go(tmp_path: Path) -> None:
    held = Held(_proc(tmp_path, (LOST, "02", 41)))
    held.hold((LOST,), 0.0)
    assert held.unanswered(1.0) == set()
    held.hold((LOST, OTHER), 50.0)  # named again by a later release: held from then on
    assert held.addresses == (LOST, OTHER)
    assert held.unanswered(HOLD_SECONDS + 1.0) == {41}
    assert held.unanswered(HOLD_SECONDS + 50.0) == set()
    assert held.addresses == ()
