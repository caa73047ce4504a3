"""Releasing the survivors of a lost peer (``--release-file FILE``): close their connections to its address.

When a machine vanishes, or a pod is deleted by force and its network is torn down before its processes'
sockets are closed, no packet tells the other pods: their processes wait on those connections until a
timeout of their own (Horovod's Gloo: ``HOROVOD_GLOO_TIMEOUT_SECONDS``, 300 s in CCE's example). The
controller knows at once. It writes the lost pod's address into a file of each surviving pod (a downwardAPI
volume projecting the pod's ``trainguard.io/release`` annotation), and the agent, inside the pod's network
namespace, shuts down every socket of the pod's processes that is connected to that address: a read blocked
on it returns at once (end of file), the collective fails, and Horovod's elastic reset starts (the same path
as when the peer's kernel resets the connection). Nothing is killed and no process is restarted; connections
to every other address are left alone.

How a socket of another process is shut down: ``pidfd_open`` + ``pidfd_getfd`` duplicate its descriptor into
the agent (Linux 5.6+), ``shutdown(SHUT_RDWR)`` acts on the socket both descriptors share, and the agent closes
its duplicate. The kernel allows it where the agent may ptrace the process: the same user, and no Yama
restriction beyond "descendants only" (the agent is the ancestor of its command's processes; ssh sessions
started by the command's sshd are its descendants too, re-parented to it as a subreaper when they
daemonize), and a seccomp profile that allows ``pidfd_getfd`` (Kubernetes' default, Unconfined, does;
``RuntimeDefault`` allows it with ``CAP_SYS_PTRACE``). Where it is refused the agent says so and nothing else
changes: the survivors wait for their own timeout, as without trainguard.

The surviving peers (the other hosts of the collective) may be named too, and then the survivors leave the
lost pod's round together. A survivor that leaves it alone, while its peers are still in it, breaks them: its
next operation asks them for data on the same Gloo slot (Horovod gives every collective the same tag) where a
peer still in the previous operation has a send pending, the peer sends that, and the survivor's Gloo, finding
more bytes than it asked for (``op.preamble.length <= op.nbytes``), ends the process (``std::terminate``):
horovodrun counts that worker failed and blacklists its host for good. The release reaches the pods of a job
a second or two apart, so the first survivor released would be that one. Hence, where this pod is still in
the lost pod's round (a connection to it still open, ``ESTABLISHED``: nothing told this pod's processes of
the loss; and no connection to a peer closed from the other end, ``CLOSE_WAIT``: no survivor has left that
round yet, and no round can have formed since, as horovodrun's driver forms the next one only once every
worker has left), the connections to the peers are shut down at once with the lost pod's: every survivor's
connections to this pod end in the same instant, and their collectives fail together. A pod released later
sees a peer's connection closed from the other end and leaves its peers' connections alone then: the next
round, which may have formed meanwhile, is not touched.

A peer whose own connection to the lost pod was reset starts the next round by itself, but Horovod 0.28.1
leaves the previous round's connections open, and a survivor still blocked on one of them would wait for it
until the timeout as for the lost pod. So ``QUIET_SECONDS`` after the release, the connections to peers that
carried no data either way for that long (``TCP_INFO``'s last data sent and received) are shut down too: the
previous round's, blocked or leaked. The next round's, which train, are left alone, and so are ssh's (they
carry horovodrun's workers) and a pod's connections to its own address.

A lost address stays held for ``HOLD_SECONDS`` after its release (``Held``): a connection attempt to it that
is still unanswered after ``UNANSWERED_SECONDS`` is shut down too. A host that is there answers a SYN in
milliseconds; one that vanished with its node leaves ``connect`` waiting for TCP's SYN retries (76 s measured
on the test cluster), and horovodrun's driver makes such a call while it holds the lock its elastic reset
needs: it tells the round's coordinator (rank 0, the oldest host, often on the lost node) that the host list
changed when the discovery drops the lost hosts, and the survivors' next round waits for that call. A new
pod that gets a held address answers its peers at once, so its connections are never touched.

The file holds one line, ``<token> <address>[,<address>...] [<peer>[,<peer>...]]``: the token names the loss
(no spaces; a new token is a new loss), the addresses are IPv4 or IPv6. The token present when the agent
starts is old news.

Standard library only: it runs in users' images from the bundle.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from trainguard.agent.nudge import TokenWatch
from trainguard.agent.sockets import (
    CLOSE_WAIT,
    ESTABLISHED,
    SYN_SENT,
    Connection,
    Released,
    descriptors,
    idle_seconds,
    read_connections,
    shut_down,
    shut_down_found,
    socket_inodes,
    tcp_state,
)

_MAX_TEXT = 4096
#: How long a connection to a surviving peer must have carried nothing to be the previous round's.
QUIET_SECONDS = 5.0
#: How long after its release a lost address is held: connection attempts to it that go unanswered are shut
#: down. Long enough for the launcher to see the discovery drop the lost hosts (kubelet refreshes a ConfigMap
#: volume on its periodic sync of the pod, every minute by default) and its driver to tell the coordinator.
HOLD_SECONDS = 120.0
#: A connection attempt to a held address still unanswered this long is to a host that is not there.
UNANSWERED_SECONDS = 1.0


@dataclass(frozen=True)
class Release:
    token: str
    #: The lost pod's: every connection to them is shut down.
    addresses: tuple[str, ...]
    #: The surviving peers' (the other hosts of the collective): their connections that are not ssh's too, the
    #: previous round's (a peer that reset by itself keeps its old connections open, and a survivor blocked
    #: on one of them waits for it as for the lost pod).
    peers: tuple[str, ...] = ()


def _addresses(text: str) -> tuple[str, ...] | None:
    found = []
    for item in text.split(","):
        try:
            found.append(str(ipaddress.ip_address(item)))
        except ValueError:
            return None
    return tuple(found)


def parse_release(text: str) -> Release | None:
    """``<token> <address>[,<address>...] [<peer>[,<peer>...]]`` on the first line; None for anything else."""
    lines = text[:_MAX_TEXT].strip().splitlines()
    parts = lines[0].split() if lines else []
    if len(parts) not in (2, 3):
        return None
    addresses = _addresses(parts[1])
    peers = _addresses(parts[2]) if len(parts) == 3 else ()
    if not addresses or peers is None:
        return None
    return Release(parts[0], addresses, peers)


def format_release(token: str, addresses: tuple[str, ...], peers: tuple[str, ...] = ()) -> str:
    """The file's line for a loss (what ``parse_release`` reads)."""
    return f"{token} {','.join(addresses)}{' ' + ','.join(peers) if peers else ''}\n"


class ReleaseWatch(TokenWatch[Release]):
    """The release file as the agent polls it (as the nudge file: ``trainguard.agent.nudge.TokenWatch``)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, parse_release)


#: A peer's connection leaves the lost round with the lost pod's only where it carried no data for at least as
#: long as they did, less this: one that carried data since is the next round's (see ``release_lost``).
ROUND_SLACK_SECONDS = 0.05


def release_lost(addresses: tuple[str, ...], peers: tuple[str, ...] = (), proc: str = "/proc") -> Released:
    """Shut down every socket of this namespace's processes connected to ``addresses``, the lost pod's; and,
    where this pod is still in the lost pod's round (``in_lost_round``), every one connected to ``peers`` (but
    ssh's and the pod's to itself) with them, so that the survivors leave that round together (see the
    docstring).

    A peer's connection is taken for the lost round's only where it has carried no data since the lost pod's
    connections last did (``ROUND_SLACK_SECONDS`` aside): the survivors may have left that round by
    themselves and formed the next one before the release reaches them (seen with both cores busy: 0.6 s
    after a forced deletion, before the release), and every connection of the next round carried its
    handshake after the lost pod's last data. Where the kernel does not tell how long a connection was idle,
    the peers' connections are left alone."""
    # One read of the TCP tables serves the lost pod's sockets, the round's check and the peers'.
    rows = read_connections(proc)
    inodes = socket_inodes(addresses, connections=rows)
    together = bool(peers) and in_lost_round(addresses, peers, connections=rows)
    peer_inodes = socket_inodes(peers, to_others=True, connections=rows) - inodes if together else set()
    if not inodes and not peer_inodes:
        return Released()
    # One read of the processes' descriptors serves both passes: the lost pod's sockets first (their idle time
    # is read as they are shut down), then the peers', judged by it.
    found = descriptors(inodes, peer_inodes, os.getpid(), proc)
    lost_idle: list[float] = []

    def lost(sock: socket.socket, inode: int) -> bool:
        lost_idle.append(idle_seconds(sock))
        return True

    done = shut_down_found(_only(found, inodes), inodes, lost)
    quiet_since = min(lost_idle, default=0.0)
    if not together or quiet_since <= 0.0:
        return done
    at_least = quiet_since - min(ROUND_SLACK_SECONDS, quiet_since / 2)
    with_them = shut_down_found(
        _only(found, peer_inodes), inodes, lambda sock, inode: idle_seconds(sock) >= at_least
    )
    for pid, count in with_them.sockets.items():
        done.sockets[pid] = done.sockets.get(pid, 0) + count
    done.peer_sockets += with_them.peer_sockets
    done.refused = sorted(set(done.refused) | set(with_them.refused))
    return done


def _only(found: dict[int, list[tuple[int, int]]], inodes: set[int]) -> dict[int, list[tuple[int, int]]]:
    """The descriptors of ``found`` (pid -> (descriptor, inode)) that are one of ``inodes``."""
    kept = {pid: [(fd, inode) for fd, inode in fds if inode in inodes] for pid, fds in found.items()}
    return {pid: fds for pid, fds in kept.items() if fds}


def in_lost_round(
    addresses: tuple[str, ...],
    peers: tuple[str, ...],
    proc: str = "/proc",
    *,
    connections: tuple[Connection, ...] | None = None,
) -> bool:
    """Whether this pod's processes are still in the round the lost pod (``addresses``) was in: a connection to
    it still open, and none to a peer closed from the other end (no survivor has left that round yet).
    ``connections``: a read of the TCP tables to use (``read_connections``)."""
    rows = read_connections(proc) if connections is None else connections
    lost_open = socket_inodes(addresses, states=frozenset({ESTABLISHED}), connections=rows)
    return bool(lost_open) and not socket_inodes(
        peers, states=frozenset({CLOSE_WAIT}), to_others=True, connections=rows
    )


def release_connections(
    addresses: tuple[str, ...], peers: tuple[str, ...] = (), proc: str = "/proc", quiet: float = 0.0
) -> Released:
    """Shut down every socket of this namespace's processes connected to ``addresses``; and those connected to
    ``peers`` (but ssh's and the pod's to itself) that carried no data either way for ``quiet`` seconds (see
    the docstring)."""
    rows = read_connections(proc)
    inodes = socket_inodes(addresses, connections=rows)
    peer_inodes = socket_inodes(peers, to_others=True, connections=rows) if peers else set()

    def wanted(sock: socket.socket, inode: int) -> bool:
        # A peer's connection in use is kept: the next round's, or one that is fine.
        return inode in inodes or idle_seconds(sock) >= quiet

    return shut_down(inodes, peer_inodes, proc, wanted)


class Held:
    """The lost addresses released within ``HOLD_SECONDS``, and the connection attempts to them seen so far:
    one still unanswered ``UNANSWERED_SECONDS`` after it was first seen is shut down (see the docstring)."""

    def __init__(self, proc: str = "/proc") -> None:
        self._proc = proc
        #: Address -> until when it is held.
        self._until: dict[str, float] = {}
        #: A connection attempt's socket inode -> when it was first seen.
        self._attempts: dict[int, float] = {}

    def hold(self, addresses: tuple[str, ...], now: float) -> None:
        for address in addresses:
            self._until[address] = now + HOLD_SECONDS

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(self._until)

    def unanswered(self, now: float) -> set[int]:
        """The attempts to held addresses unanswered for ``UNANSWERED_SECONDS`` (seen since at least that
        long); forgets addresses held long enough."""
        self._until = {address: until for address, until in self._until.items() if until > now}
        pending = socket_inodes(self.addresses, self._proc, frozenset({SYN_SENT})) if self._until else set()
        self._attempts = {inode: self._attempts.get(inode, now) for inode in pending}
        return {inode for inode, seen in self._attempts.items() if now - seen >= UNANSWERED_SECONDS}

    def release(self, now: float) -> Released:
        """Shut down the attempts ``unanswered`` says (those still attempts: answered meanwhile, one is left
        alone); a connect blocked on one fails at once (connection reset)."""
        return shut_down(self.unanswered(now), set(), self._proc, lambda sock, _: tcp_state(sock) == SYN_SENT)
