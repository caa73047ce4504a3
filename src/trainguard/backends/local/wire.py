"""The local API's transport: a unix socket in ``$TRAINGUARD_HOME`` (mode 0600 in a 0700 directory), one
JSON object per line each way. The server also checks the peer's uid (SO_PEERCRED): only the owner may talk.

Unix socket paths are limited to about 108 bytes; a longer home is reached through ``/proc/self/fd``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Longest path we bind or connect to directly.
_MAX_PATH = 100
MAX_MESSAGE = 64 * 1024 * 1024


@contextlib.contextmanager
def address(path: Path) -> Iterator[str]:
    """A usable address for ``path``: itself, or a short alias through an open descriptor of its directory."""
    if len(str(path)) <= _MAX_PATH:
        yield str(path)
        return
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{directory}/{path.name}"
    finally:
        os.close(directory)


def peer_uid(connection: socket.socket) -> int | None:
    try:
        data = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    _pid, uid, _gid = struct.unpack("3i", data)
    return int(uid)


def send(connection: socket.socket, message: Any) -> None:
    connection.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")


def receive(reader: Any) -> Any:
    """One message from a ``makefile('rb')`` reader; None at end of stream."""
    line = reader.readline(MAX_MESSAGE)
    if not line:
        return None
    return json.loads(line)
