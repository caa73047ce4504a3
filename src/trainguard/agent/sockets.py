"""This pod's processes' TCP sockets: which are connected to an address (``/proc/net/tcp{,6}``), which process
holds each (``/proc/PID/fd``), and shutting one down from outside its process (``pidfd_getfd``): what a release
(``trainguard.agent.release``) does with them.

Standard library only: it runs in users' images from the bundle.
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

#: Every architecture Linux runs on numbers these the same (they came after the syscall tables were unified).
_SYS_PIDFD_OPEN = 434
_SYS_PIDFD_GETFD = 438
#: TCP states in /proc/net/tcp: everything but LISTEN (0A) and CLOSE (07) is a connection to somebody.
_NOT_CONNECTED = {"0A", "07"}
#: TCP states in /proc/net/tcp: a connection attempt (SYN sent, no answer yet); an open connection; one that
#: its other end closed (its FIN received) and that this end's process keeps open.
SYN_SENT, ESTABLISHED, CLOSE_WAIT = "02", "01", "08"


@dataclass
class Released:
    """What one release did."""

    #: Sockets shut down, by pid.
    sockets: dict[int, int] = field(default_factory=dict)
    #: Of those, the connections to surviving peers (``release_lost``: this pod left the lost pod's round with
    #: its peers).
    peer_sockets: int = 0
    #: Why some could not be (one line per kind of refusal), e.g. "pidfd_getfd: Operation not permitted".
    refused: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(self.sockets.values())


def _remote_hex(address: str) -> set[str]:
    """How ``/proc/net/tcp{,6}`` write ``address`` as a remote address (without the port)."""
    ip = ipaddress.ip_address(address)
    forms = set()
    if isinstance(ip, ipaddress.IPv4Address):
        forms.add(ip.packed[::-1].hex().upper())
        ip = ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed)  # as tcp6 lists it, mapped
    packed = ip.packed
    forms.add("".join(packed[i : i + 4][::-1].hex() for i in range(0, 16, 4)).upper())
    return forms


class Connection(NamedTuple):
    """One row of ``/proc/net/tcp{,6}``: the local and remote addresses (hex, as the table writes them, without
    the port), the TCP state ("01" established, "02" SYN sent...) and the socket's inode."""

    local: str
    remote: str
    state: str
    inode: int


def read_connections(proc: str = "/proc") -> tuple[Connection, ...]:
    """This network namespace's TCP sockets connected to somebody (not listening, not closed), as
    ``/proc/net/tcp{,6}`` list them now: one read serves every question a release asks of them."""
    rows: list[Connection] = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{table}", encoding="ascii") as file:
                next(file, None)  # the header
                for line in file:
                    fields = line.split()
                    if len(fields) < 10 or fields[3] in _NOT_CONNECTED:
                        continue
                    if not fields[9].isdigit() or fields[9] == "0":
                        continue
                    local, remote = (field.rsplit(":", 1)[0] for field in fields[1:3])
                    rows.append(Connection(local, remote, fields[3], int(fields[9])))
        except OSError:
            continue
    return tuple(rows)


def socket_inodes(
    addresses: tuple[str, ...],
    proc: str = "/proc",
    states: frozenset[str] | None = None,
    *,
    to_others: bool = False,
    connections: tuple[Connection, ...] | None = None,
) -> set[int]:
    """The inodes of this network namespace's TCP sockets connected to any of ``addresses`` (those in one of
    ``states`` only, as /proc/net/tcp writes them, where given; ``to_others``: not those from the same address,
    a pod's connections to itself). ``connections``: a read of the tables to use (``read_connections``),
    instead of reading them again."""
    wanted: set[str] = set()
    for address in addresses:
        wanted |= _remote_hex(address)
    rows = read_connections(proc) if connections is None else connections
    return {
        row.inode
        for row in rows
        if row.remote in wanted
        and (states is None or row.state in states)
        and not (to_others and row.local == row.remote)
    }


#: Processes whose connections to surviving peers are kept: ssh carries horovodrun's workers themselves.
_KEPT_COMMANDS = frozenset({"ssh", "sshd", "sshd-session"})


def _command(pid: str, proc: str) -> str:
    try:
        with open(f"{proc}/{pid}/comm", encoding="utf-8", errors="replace") as file:
            return file.read().strip()
    except OSError:
        return ""


def descriptors(
    inodes: set[int], peer_inodes: set[int], skip: int, proc: str = "/proc"
) -> dict[int, list[tuple[int, int]]]:
    """pid -> the descriptors of its that are one of ``inodes``, or of ``peer_inodes`` unless it is ssh's
    (this pid's own left out)."""
    links = {f"socket:[{inode}]" for inode in inodes}
    peer_links = {f"socket:[{inode}]" for inode in peer_inodes}
    found: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == skip:
            continue
        wanted = links if _command(entry, proc) in _KEPT_COMMANDS else links | peer_links
        try:
            fds = os.listdir(f"{proc}/{entry}/fd")
        except OSError:
            continue  # gone, or not ours to look at
        for fd in fds:
            try:
                link = os.readlink(f"{proc}/{entry}/fd/{fd}")
            except OSError:
                continue
            if link in wanted:
                found.setdefault(int(entry), []).append((int(fd), int(link[8:-1])))
    return found


def _syscall(number: int, *args: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = int(libc.syscall(number, *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def shut_down(
    inodes: set[int], peer_inodes: set[int], proc: str, wanted: Callable[[socket.socket, int], bool]
) -> Released:
    """Shut down the sockets ``inodes`` of this namespace's processes, and ``peer_inodes`` (but ssh's), each
    that ``wanted`` (given the socket and its inode) says."""
    if not inodes and not peer_inodes:
        return Released()
    return shut_down_found(descriptors(inodes, peer_inodes, os.getpid(), proc), inodes, wanted)


def shut_down_found(
    found: dict[int, list[tuple[int, int]]], inodes: set[int], wanted: Callable[[socket.socket, int], bool]
) -> Released:
    """Shut down the descriptors ``found`` (pid -> (descriptor, socket inode)) that ``wanted`` says; those not
    of ``inodes`` are counted as connections to peers."""
    done = Released()
    refusals: set[str] = set()
    for pid, fds in found.items():
        try:
            pidfd = _syscall(_SYS_PIDFD_OPEN, pid, 0)
        except OSError as error:
            if error.errno != errno.ESRCH:  # gone meanwhile: nothing to release
                refusals.add(f"pidfd_open: {error.strerror}")
            continue
        try:
            for fd, inode in fds:
                try:
                    copy = _syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
                except OSError as error:
                    if error.errno != errno.EBADF:  # closed meanwhile
                        refusals.add(f"pidfd_getfd: {error.strerror}")
                    continue
                sock = socket.socket(fileno=copy)
                try:
                    if not wanted(sock, inode):
                        continue
                    sock.shutdown(socket.SHUT_RDWR)
                    done.sockets[pid] = done.sockets.get(pid, 0) + 1
                    done.peer_sockets += inode not in inodes
                except OSError as error:
                    if error.errno != errno.ENOTCONN:
                        refusals.add(f"shutdown: {error.strerror}")
                finally:
                    sock.close()  # the duplicate only: the process's own descriptor stays open
        finally:
            os.close(pidfd)
    done.refused = sorted(refusals)
    return done


#: ``struct tcp_info``: ``tcpi_last_data_sent`` and ``tcpi_last_data_recv`` (milliseconds ago) are at these
#: offsets on every Linux since 2.6.
_LAST_DATA_SENT, _LAST_DATA_RECV = 44, 52


def tcp_state(sock: socket.socket) -> str:
    """The connection's state as /proc/net/tcp writes it ("01" established, "02" SYN sent...); "" if unknown."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    except (OSError, AttributeError):
        return ""
    return f"{info[0]:02X}" if info else ""


def idle_seconds(sock: socket.socket) -> float:
    """How long the connection has carried no data, either way (0 where the kernel does not say)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except (OSError, AttributeError):
        return 0.0
    if len(info) < _LAST_DATA_RECV + 4:
        return 0.0
    sent = int.from_bytes(info[_LAST_DATA_SENT : _LAST_DATA_SENT + 4], "little")
    received = int.from_bytes(info[_LAST_DATA_RECV : _LAST_DATA_RECV + 4], "little")
    return min(sent, received) / 1000.0
