"""What the ssh stand-in and a host process say to each other over one loopback TCP connection.

The client sends one JSON line: ``{"token", "host", "command"}``. The host answers with frames (a kind byte,
a 4-byte big-endian length, the payload): ``R`` accepted, or ``D`` denied with a message; then ``1`` stdout
and ``2`` stderr bytes as the command writes them, and ``X`` with its exit code (ASCII) at the end. Either side
closing the connection ends the session: the client reports 255, the host kills the command.

The host file ``<hosts dir>/<pod>.json`` holds ``{"port", "token", "pid"}``; the token keeps other users of the
machine (who can reach loopback ports too) from running commands in the pod.
"""

from __future__ import annotations

import json
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

ACCEPTED = b"R"
DENIED = b"D"
STDOUT = b"1"
STDERR = b"2"
EXIT = b"X"
_HEADER = struct.Struct(">cI")
#: A request line longer than this is not ours (Horovod's commands are a few KiB).
MAX_REQUEST = 1 << 20


class Disconnected(ConnectionError):
    """The other side closed the connection (or it broke)."""


@dataclass(frozen=True)
class Request:
    token: str
    host: str
    command: str

    def encode(self) -> bytes:
        return json.dumps({"token": self.token, "host": self.host, "command": self.command}).encode() + b"\n"

    @classmethod
    def decode(cls, line: bytes) -> Request:
        data = json.loads(line)
        if not isinstance(data, dict) or not all(
            isinstance(data.get(k), str) for k in ("token", "host", "command")
        ):
            raise ValueError("not a request")
        return cls(data["token"], data["host"], data["command"])


@dataclass(frozen=True)
class HostFile:
    port: int
    token: str
    pid: int

    def write(self, path: Path) -> None:
        """Publish atomically (write, fsync, rename), readable by the owner only."""
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            json.dump({"port": self.port, "token": self.token, "pid": self.pid}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)

    @classmethod
    def read(cls, path: Path) -> HostFile | None:
        """The published host, or None when there is none (yet) or the file is not one."""
        try:
            data = json.loads(path.read_text())
            return cls(int(data["port"]), str(data["token"]), int(data["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def send_frame(sock: socket.socket, kind: bytes, payload: bytes = b"") -> None:
    sock.sendall(_HEADER.pack(kind, len(payload)) + payload)


def read_frame(sock: socket.socket) -> tuple[bytes, bytes]:
    kind, length = _HEADER.unpack(_read_exactly(sock, _HEADER.size))
    return kind, _read_exactly(sock, length)


def read_line(sock: socket.socket) -> bytes:
    """One request line (without reading past it: nothing follows it anyway)."""
    chunks = bytearray()
    while not chunks.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise Disconnected("the client closed the connection before its request")
        chunks += chunk
        if len(chunks) > MAX_REQUEST:
            raise ValueError("request too long")
    return bytes(chunks)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data))
        except OSError as error:
            raise Disconnected(str(error)) from error
        if not chunk:
            raise Disconnected("the connection was closed")
        data += chunk
    return bytes(data)
