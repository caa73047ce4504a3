"""Making a gloo group abortable: the TCP connections a group opened, found and shut down.

gloo has no way to end a collective that waits on a peer (``ProcessGroupGloo.abort`` returns, the wait goes
on until the timeout). Its pairs are TCP connections of this process, opened while the group is made: the
sockets that appear then are the group's. Shutting them down (not closing: the descriptors stay gloo's) makes
every pending and later operation on them fail at once with "Connection closed", here and, through the
peers' end of each connection, on every other member too. The group's listening socket is left alone (gloo
aborts the process when its accept fails).
"""

from __future__ import annotations

import contextlib
import os
import socket

_FDS = "/proc/self/fd"


def sockets() -> dict[int, str]:
    """This process's socket descriptors: fd -> its ``socket:[inode]`` link."""
    found: dict[int, str] = {}
    for name in os.listdir(_FDS):
        with contextlib.suppress(OSError):
            link = os.readlink(f"{_FDS}/{name}")
            if link.startswith("socket:"):
                found[int(name)] = link
    return found


def opened_since(before: dict[int, str]) -> dict[int, str]:
    """The sockets opened since ``before`` was taken (a descriptor reused for another socket counts)."""
    return {fd: link for fd, link in sockets().items() if before.get(fd) != link}


def shut_down(owned: dict[int, str]) -> int:
    """Shuts down each connected socket of ``owned`` that is still the same socket. Returns how many."""
    count = 0
    for fd, link in owned.items():
        with contextlib.suppress(OSError):
            if os.readlink(f"{_FDS}/{fd}") != link:
                continue  # closed, and the number reused since
            duplicate = socket.socket(fileno=os.dup(fd))
            try:
                if duplicate.type != socket.SOCK_STREAM or duplicate.family not in (
                    socket.AF_INET,
                    socket.AF_INET6,
                ):
                    continue  # gloo's pairs are TCP
                if duplicate.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                    continue
                duplicate.shutdown(socket.SHUT_RDWR)
                count += 1
            finally:
                duplicate.close()
    return count
