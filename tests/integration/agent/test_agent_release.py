"""The agent's release of a lost peer (``trainguard.agent.release``), on real sockets and processes: the
connections of other processes to the lost address are shut down (a blocked read returns at once), every
other connection stays as it was, and through the agent itself a token in its release file does it once;
a connection attempt to the lost address made after its release that goes unanswered is shut down too."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_harness import wait_for

from trainguard.agent.release import (
    UNANSWERED_SECONDS,
    Held,
    format_release,
    in_lost_round,
    parse_release,
    release_connections,
    release_lost,
)
from trainguard.agent.sockets import socket_inodes

pytestmark = pytest.mark.integration

#: Two peers on loopback with addresses of their own (Linux routes all of 127/8 to lo).
LOST, KEPT = "127.0.0.2", "127.0.0.3"

_PEER = """
import socket, sys, time
lost = socket.create_connection((sys.argv[1], int(sys.argv[2])))
kept = socket.create_connection((sys.argv[3], int(sys.argv[4])))
print("connected", flush=True)
started = time.monotonic()
data = lost.recv(10)  # blocks: the lost peer never writes (as a vanished machine)
print(f"lost returned {data!r} after {time.monotonic() - started:.2f}", flush=True)
kept.sendall(b"still here")
print("kept works", flush=True)
"""


def _listener(address: str) -> socket.socket:
    server = socket.socket()
    server.bind((address, 0))
    server.listen(1)
    return server


#: Connects to argv[1]:argv[2] and says how that ended, and after how long.
_CONNECT = """
import socket, sys, time
started = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])))
    print("connected", flush=True)
except OSError as error:
    print(f"{type(error).__name__} after {time.monotonic() - started:.2f}", flush=True)
"""


@contextlib.contextmanager
def _unanswering(address: str) -> Iterator[int]:
    """A port at ``address`` that answers no SYN, as a vanished host: a listener whose accept queue is full
    (Linux drops the SYNs it cannot queue, and the connecting side retries them)."""
    server = socket.socket()
    server.bind((address, 0))
    server.listen(0)
    port = server.getsockname()[1]
    filler = socket.create_connection((address, port))  # the one connection the queue holds, never accepted
    try:
        yield port
    finally:
        filler.close()
        server.close()


@pytest.fixture
def peer() -> Iterator[tuple[subprocess.Popen[str], socket.socket, socket.socket]]:
    lost, kept = _listener(LOST), _listener(KEPT)
    process = subprocess.Popen(
        [sys.executable, "-c", _PEER, LOST, str(lost.getsockname()[1]), KEPT, str(kept.getsockname()[1])],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "connected"
    lost_end, _ = lost.accept()
    kept_end, _ = kept.accept()
    yield process, lost_end, kept_end
    process.kill()
    process.wait(10)
    assert process.stdout is not None
    process.stdout.close()
    for item in (lost, kept, lost_end, kept_end):
        item.close()


def test_parse_and_format() -> None:
    release = parse_release(format_release("trainer-1#7", ("10.0.0.5", "fd00::5")))
    assert release is not None
    assert (release.token, release.addresses) == ("trainer-1#7", ("10.0.0.5", "fd00::5"))
    for garbled in ("", "token", "token not-an-address", "a b c", "token 10.0.0.5,", "token 999.0.0.1"):
        assert parse_release(garbled) is None, garbled


def test_only_the_connections_to_the_lost_address_are_shut_down(
    peer: tuple[subprocess.Popen[str], socket.socket, socket.socket],
) -> None:
    process, _, kept_end = peer
    assert socket_inodes((LOST,))  # the peer's connection, as /proc/net/tcp lists it
    started = time.monotonic()
    done = release_connections((LOST,))
    assert done.refused == []
    assert done.sockets == {process.pid: 1}
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line.startswith("lost returned b''"), line  # end of file at once, as after a reset
    assert time.monotonic() - started < 5
    assert process.stdout.readline().strip() == "kept works"
    kept_end.settimeout(10)
    assert kept_end.recv(10) == b"still here"  # the other connection was left alone


def test_a_peers_connections_are_shut_down_too_but_not_sshs(tmp_path: Path) -> None:
    """Named as peers (the other hosts), connections are shut down too, except those of ssh's processes."""
    kept_listener = _listener(KEPT)
    ssh = tmp_path / "ssh"  # a process whose name is ssh's (comm), holding a connection to the peer
    ssh.symlink_to(sys.executable)
    script = "import socket, sys, time\ns = socket.create_connection((sys.argv[1], int(sys.argv[2])))\n"
    script += "print('connected', flush=True)\nprint(repr(s.recv(10)), flush=True)\n"
    port = str(kept_listener.getsockname()[1])
    worker = subprocess.Popen([sys.executable, "-c", script, KEPT, port], stdout=subprocess.PIPE, text=True)
    sshd = subprocess.Popen([str(ssh), "-c", script, KEPT, port], stdout=subprocess.PIPE, text=True)
    try:
        for process in (worker, sshd):
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "connected"
        ends = [kept_listener.accept()[0] for _ in range(2)]
        # A peer's connection that carried data within the quiet time is in use: kept.
        assert release_connections((), peers=(KEPT,), quiet=600).sockets == {}
        done = release_connections(("127.0.0.9",), peers=(KEPT,), quiet=0)
        assert done.sockets == {worker.pid: 1}
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "b''"
        assert sshd.poll() is None  # still waiting on its connection
        for end in ends:
            end.close()
    finally:
        for process in (worker, sshd):
            process.kill()
            process.wait(10)
            if process.stdout is not None:
                process.stdout.close()
        kept_listener.close()


#: Holds a connection to each ``address,port,source`` of its arguments (from ``source`` where one is given),
#: says "connected", then waits until its standard input ends.
_HOLDER = """
import socket, sys
held = []
for spec in sys.argv[1:]:
    address, port, source = spec.split(",")
    conn = socket.socket()
    if source:
        conn.bind((source, 0))
    conn.connect((address, int(port)))
    held.append(conn)
print("connected", flush=True)
sys.stdin.read()
"""

#: TCP states as /proc/net/tcp writes them.
ESTABLISHED, CLOSE_WAIT = frozenset({"01"}), frozenset({"08"})


@contextlib.contextmanager
def _listeners(*addresses: str) -> Iterator[list[socket.socket]]:
    """A listener on each address (``_listener``), all closed on the way out."""
    servers = [_listener(address) for address in addresses]
    try:
        yield servers
    finally:
        for server in servers:
            server.close()


@contextlib.contextmanager
def _holder(
    *targets: tuple[socket.socket, str],
) -> Iterator[tuple[subprocess.Popen[str], list[socket.socket]]]:
    """A process (a survivor's worker) connected to each listener of ``targets`` (from the source address given
    with it, where not ""), and the listeners' ends of those connections, in that order."""
    specs = [f"{server.getsockname()[0]},{server.getsockname()[1]},{source}" for server, source in targets]
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, *specs], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    ends: list[socket.socket] = []
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "connected"
        ends = [server.accept()[0] for server, _ in targets]
        for end in ends:
            end.settimeout(10)
        yield process, ends
    finally:
        process.kill()
        process.wait(10)
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()
        for end in ends:
            end.close()


def test_a_survivor_still_in_the_lost_pods_round_leaves_it_with_its_peers() -> None:
    """Its connection to the lost pod still open and none of its peers' closed: its connections to the peers
    are shut down with the lost pod's, at once, so that the peers' collectives fail in the same instant (not
    its connection to its own address, nor anything else)."""
    lost, kept, other = _listener(LOST), _listener(KEPT), _listener("127.0.0.4")
    try:
        with _holder((lost, ""), (kept, ""), (kept, KEPT), (other, "")) as (process, ends):
            time.sleep(0.2)  # the round stalled a moment before the release
            assert in_lost_round((LOST,), (KEPT,))
            done = release_lost((LOST,), (KEPT,))
            assert (done.sockets, done.peer_sockets, done.refused) == ({process.pid: 2}, 1, [])
            lost_end, peer_end, own_end, other_end = ends
            assert lost_end.recv(10) == b""  # its FIN, at once
            assert peer_end.recv(10) == b""
            # Its connection to its own address, and to an address neither lost nor a peer: open.
            assert socket_inodes((KEPT,), states=ESTABLISHED)
            assert socket_inodes(("127.0.0.4",), states=ESTABLISHED)
            own_end.sendall(b"x")
            other_end.sendall(b"x")
    finally:
        for server in (lost, kept, other):
            server.close()


def test_a_survivor_already_in_the_next_round_keeps_its_connections_of_that_round() -> None:
    """The survivors left the lost round by themselves and formed the next one before the release came (its
    connections carried data after the lost pod's last did): only the lost round's connections are shut down,
    the lost pod's and a peer's that has been idle as long."""
    with (
        _listeners(LOST, KEPT) as (lost, kept),
        _holder((lost, ""), (kept, ""), (kept, "")) as (process, ends),
    ):
        lost_end, old_end, next_end = ends
        time.sleep(0.5)  # the lost pod went silent; the next round's handshake comes after
        next_end.sendall(b"hello")
        assert in_lost_round((LOST,), (KEPT,))
        done = release_lost((LOST,), (KEPT,))
        assert (done.sockets, done.peer_sockets) == ({process.pid: 2}, 1)
        assert lost_end.recv(10) == b""
        assert old_end.recv(10) == b""
        assert len(socket_inodes((KEPT,), states=ESTABLISHED)) == 1  # the next round's: open
        next_end.sendall(b"x")


def test_a_survivor_released_after_a_peer_left_the_round_leaves_its_peers_connections_alone() -> None:
    """A peer already closed a connection of the round (it left it, or a next round may have formed since):
    only the lost pod's connections are shut down; the peers' are the next round's to keep."""
    with (
        _listeners(LOST, KEPT) as (lost, kept),
        _holder((lost, ""), (kept, ""), (kept, "")) as (process, ends),
    ):
        lost_end, left_end, next_end = ends
        left_end.close()  # the peer that left: this side's connection is half-closed (CLOSE_WAIT)
        wait_for(lambda: socket_inodes((KEPT,), states=CLOSE_WAIT), 10, "the peer's connection half-closed")
        assert not in_lost_round((LOST,), (KEPT,))
        done = release_lost((LOST,), (KEPT,))
        assert (done.sockets, done.peer_sockets) == ({process.pid: 1}, 0)
        assert lost_end.recv(10) == b""
        assert len(socket_inodes((KEPT,), states=ESTABLISHED)) == 1  # the next round's: open
        next_end.sendall(b"x")


def test_a_survivor_whose_connection_to_the_lost_pod_was_closed_leaves_its_peers_connections_alone() -> None:
    """Its connection to the lost pod was closed from the other end (its processes know of the loss): it may
    be in the next round already, whose connections to the peers are kept."""
    with _listeners(LOST, KEPT) as (lost, kept), _holder((lost, ""), (kept, "")) as (process, ends):
        ends[0].close()
        wait_for(
            lambda: socket_inodes((LOST,), states=CLOSE_WAIT), 10, "the lost pod's connection half-closed"
        )
        assert not in_lost_round((LOST,), (KEPT,))
        done = release_lost((LOST,), (KEPT,))
        assert (done.sockets, done.peer_sockets) == ({process.pid: 1}, 0)
        assert socket_inodes((KEPT,), states=ESTABLISHED)


def _agent(report: Path, release_file: Path) -> list[str]:
    """The agent's command line, reporting to ``report`` and reading its releases from ``release_file``."""
    return [
        sys.executable,
        "-m",
        "trainguard.agent",
        "--report",
        str(report),
        "--release-file",
        str(release_file),
    ]


def test_nothing_connected_to_the_address_is_nothing_to_do() -> None:
    done = release_connections(("127.0.0.9",))
    assert (done.count, done.refused) == (0, [])


def test_the_agent_releases_once_per_token_and_reports_it(tmp_path: Path) -> None:
    lost, kept = _listener(LOST), _listener(KEPT)
    release_file = tmp_path / "release"
    release_file.write_text("old-loss 127.0.0.2\n")  # there when the agent starts: old news, never acted on
    report = tmp_path / "report.jsonl"
    argv = _agent(report, release_file)
    command = [
        sys.executable,
        "-c",
        _PEER,
        LOST,
        str(lost.getsockname()[1]),
        KEPT,
        str(kept.getsockname()[1]),
    ]
    agent = subprocess.Popen([*argv, "--", *command], stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout is not None
        assert agent.stdout.readline().strip() == "connected"
        lost_end, _ = lost.accept()
        kept_end, _ = kept.accept()
        # The agent read the file before it started the command: the next token written is news.
        release_file.write_text(format_release("trainer-1#3", (LOST,)))
        assert agent.stdout.readline().strip().startswith("lost returned b''")
        assert agent.stdout.readline().strip() == "kept works"
        assert agent.wait(30) == 0
        events = [json.loads(line) for line in report.read_text().splitlines()]
        (released,) = [e for e in events if e["event"] == "released"]
        assert (released["token"], released["addresses"], released["sockets"]) == ("trainer-1#3", [LOST], 1)
        lost_end.close()
        kept_end.close()
    finally:
        agent.kill()
        agent.wait(10)
        if agent.stdout is not None:
            agent.stdout.close()
        lost.close()
        kept.close()


def _syn_sent(address: str) -> bool:
    return bool(socket_inodes((address,), states=frozenset({"02"})))


def test_an_unanswered_attempt_to_a_held_address_is_shut_down_and_nothing_else(
    peer: tuple[subprocess.Popen[str], socket.socket, socket.socket],
) -> None:
    """Held, the lost address's connection attempts that go unanswered are shut down (the connect fails at
    once); an established connection to it (a new pod that got the address) and an attempt to another
    address are left alone."""
    process, lost_end, _ = peer
    with _unanswering(LOST) as lost_port, _unanswering(KEPT) as kept_port:
        attempts = [
            subprocess.Popen(
                [sys.executable, "-c", _CONNECT, address, str(port)], stdout=subprocess.PIPE, text=True
            )
            for address, port in ((LOST, lost_port), (KEPT, kept_port))
        ]
        try:
            wait_for(lambda: _syn_sent(LOST) and _syn_sent(KEPT), 10, "both connection attempts")
            held = Held()
            held.hold((LOST,), 0.0)
            assert held.release(0.0).count == 0  # just seen: it may be answered yet
            done = held.release(UNANSWERED_SECONDS)
            assert (done.sockets, done.refused) == ({attempts[0].pid: 1}, [])
            assert attempts[0].stdout is not None
            assert attempts[0].stdout.readline().strip().startswith("ConnectionResetError after ")
            assert attempts[1].poll() is None  # another address: still trying
            assert _syn_sent(KEPT)
            assert process.poll() is None  # the established connection to LOST: untouched
            lost_end.sendall(b"x")
            assert process.stdout is not None
            assert process.stdout.readline().strip().startswith("lost returned b'x'")
        finally:
            for attempt in attempts:
                attempt.kill()
                attempt.wait(10)
                if attempt.stdout is not None:
                    attempt.stdout.close()


def test_the_agent_shuts_down_the_attempts_made_after_a_release(tmp_path: Path) -> None:
    """As horovodrun's driver does after a host's loss: it connects to the lost host (its coordinator) after
    the release, and would wait for TCP's SYN retries; the agent ends that attempt within seconds."""
    release_file = tmp_path / "release"
    report = tmp_path / "report.jsonl"
    go = tmp_path / "go"
    with _unanswering(LOST) as port:
        script = f"import os, time\nprint('ready', flush=True)\nwhile not os.path.exists({str(go)!r}):\n"
        script += "    time.sleep(0.05)\n" + _CONNECT
        argv = _agent(report, release_file)
        agent = subprocess.Popen(
            [*argv, "--", sys.executable, "-c", script, LOST, str(port)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert agent.stdout is not None
            assert agent.stdout.readline().strip() == "ready"  # the agent read the file before it started it
            release_file.write_text(format_release("trainer-1#3", (LOST,)))
            wait_for(
                lambda: "released" in (report.read_text() if report.exists() else ""),
                10,
                "the release reported",
            )
            go.touch()  # the connect starts after the release, which found nothing to shut down
            line = agent.stdout.readline().strip()
            assert line.startswith("ConnectionResetError after "), line
            assert float(line.rsplit(" ", 1)[1]) < 5  # not TCP's SYN retries (over two minutes)
            assert agent.wait(30) == 0
            events = [json.loads(line) for line in report.read_text().splitlines()]
            released = [e for e in events if e["event"] == "released"]
            # The release itself (which shuts down this test's own connection filling the queue: the agent
            # sees every process of its network namespace), then the attempt.
            assert [e.get("attempts", False) for e in released] == [False, True]
            assert (released[1]["token"], released[1]["sockets"]) == ("trainer-1#3", 1)
        finally:
            agent.kill()
            agent.wait(10)
            if agent.stdout is not None:
                agent.stdout.close()
