"""HTTP/1.1 to one API server over kept-alive connections: the requests the operator sends, and nothing more.

The API server answers JSON with a length, or in chunks (lists, watches), and keeps its connections alive; that
is all this speaks. It replaces urllib3 (and ``http.client`` under it) on the operator's path, whose pool
manager, header objects and parsing by ``email`` cost about four times the CPU of a request itself: the
operator sends thousands (a pod, a status, an Event each), and its CPU is compared with a Go operator's.
Configurations that need more (a proxy, an exec plugin) go through the official client, and urllib3, as before
(``trainguard.backends.k8s.client.OfficialConnection``).

A connection taken from the pool that the server closed meanwhile (its idle timeout, just as the request went
out) is found closed before anything was answered: the request goes again once on a new connection, as Go's
client does. Any other failure closes the connection and raises ``TransportError``.
"""

from __future__ import annotations

import io
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, cast
from urllib.parse import urlsplit

#: Bytes read at once from a connection, and the most a status or header line may hold.
BUFFER = 65536
#: The most header lines an answer may have.
MAX_HEADERS = 200


class TransportError(Exception):
    """The request got no complete answer: no connection, TLS refused, a timeout, a reset, a broken answer."""


class _ClosedBeforeAnswer(TransportError):
    """The server closed the connection before any byte of an answer."""


@dataclass(frozen=True)
class Timeouts:
    connect: float
    read: float


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rfile = cast(io.BufferedReader, sock.makefile("rb", buffering=BUFFER))

    def close(self) -> None:
        try:
            self.rfile.close()
            self.sock.close()
        except OSError:
            pass

    def __del__(self) -> None:  # an answer dropped unread, a pool dropped unclosed: its socket closed quietly
        self.close()

    def dropped(self) -> bool:
        """An idle connection with something to read is one the server closed (or broke): never reused."""
        try:
            poller = select.poll()  # not select(): an operator may hold more than 1,024 descriptors
            poller.register(self.sock, select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True


class Answer(Protocol):
    """An answer's status and body, however it came: ``read`` takes the whole body; ``chunks`` yields it as it
    comes (a watch); ``close`` lets the connection go (``PooledAnswer``; the official client's answers in
    ``client.py``)."""

    status: int

    def read(self) -> bytes: ...

    def chunks(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class PooledAnswer:
    """An answer on one of the ``Pool``'s connections. ``close`` hands the connection back when the body was read
    to its end, and closes it otherwise."""

    def __init__(
        self, pool: Pool, conn: _Conn, status: int, length: int | None, chunked: bool, keep: bool
    ) -> None:
        self.status = status
        self._pool = pool
        self._conn: _Conn | None = conn
        self._length = length
        self._chunked = chunked
        self._keep = keep
        self._done = False

    def read(self) -> bytes:
        return b"".join(self.chunks())

    def chunks(self) -> Iterator[bytes]:
        conn = self._conn
        if conn is None or self._done:
            return
        rfile = conn.rfile
        try:
            if self._chunked:
                while size := _chunk_size(rfile.readline(BUFFER)):
                    yield _exactly(rfile, size)
                    if rfile.readline(BUFFER) != b"\r\n":
                        raise TransportError("a chunk of the answer does not end where its size says")
                while rfile.readline(BUFFER) not in (b"\r\n", b""):  # trailers
                    pass
            elif self._length is not None:
                left = self._length
                while left:
                    piece = rfile.read1(min(left, BUFFER))
                    if not piece:
                        raise TransportError(f"the answer ended {left} bytes short of its length")
                    left -= len(piece)
                    yield piece
            else:  # no length: the body runs until the server closes the connection
                self._keep = False
                while piece := rfile.read1(BUFFER):
                    yield piece
        except (OSError, ValueError) as error:
            self._keep = False
            raise TransportError(_words(error)) from None
        self._done = True

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._keep:
            self._pool.give_back(conn)
        else:
            conn.close()


class Pool:
    """Kept-alive connections to the server of ``url`` (its scheme, host, port and path prefix), TLS with
    ``context`` for https; at most ``size`` idle ones are kept."""

    def __init__(
        self, url: str, context: ssl.SSLContext | None, server_hostname: str | None, size: int
    ) -> None:
        parts = urlsplit(url)
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        self.host_header = parts.netloc.rsplit("@", 1)[-1]
        self.context = context if self.tls else None
        self.server_hostname = server_hostname or self.host
        self.size = size
        self._idle: list[_Conn] = []
        self._lock = threading.Lock()

    def request(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None, timeouts: Timeouts
    ) -> PooledAnswer:
        """Sends the request and reads its status and headers; the body is the ``PooledAnswer``'s to read."""
        lines = [f"{method} {self.prefix}{target} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        while True:
            conn, reused = self._take(timeouts.connect)
            try:
                conn.sock.settimeout(timeouts.read)
                conn.sock.sendall(data)
                return self._answer(conn, method)
            except _ClosedBeforeAnswer:
                conn.close()
                if not reused:
                    raise
            except (OSError, ValueError, TransportError) as error:
                conn.close()
                if reused and isinstance(error, (BrokenPipeError, ConnectionResetError)):
                    continue  # the server closed it while it was idle: nothing was answered
                raise TransportError(_words(error)) from None

    def give_back(self, conn: _Conn) -> None:
        with self._lock:
            if len(self._idle) < self.size:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __del__(self) -> None:
        self.close()

    def _take(self, connect_timeout: float) -> tuple[_Conn, bool]:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._open(connect_timeout), False
            if not conn.dropped():
                return conn, True
            conn.close()

    def _open(self, connect_timeout: float) -> _Conn:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=connect_timeout)
        except OSError as error:
            raise TransportError(f"cannot connect to {self.host_header}: {_words(error)}") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.context is not None:
                sock = self.context.wrap_socket(sock, server_hostname=self.server_hostname)
        except (OSError, ValueError) as error:
            sock.close()
            raise TransportError(_words(error)) from None
        return _Conn(sock)

    def _answer(self, conn: _Conn, method: str) -> PooledAnswer:
        rfile = conn.rfile
        status_line = rfile.readline(BUFFER)
        if not status_line:
            raise _ClosedBeforeAnswer("the server closed the connection without an answer")
        version, _, rest = status_line.partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise TransportError(f"not an HTTP answer: {status_line[:80]!r}")
        status = int(code)
        length: int | None = None
        chunked = False
        keep = version == b"HTTP/1.1"
        for _ in range(MAX_HEADERS):
            line = rfile.readline(BUFFER)
            if line in (b"\r\n", b"\n"):
                break
            if not line:
                raise TransportError("the answer ended within its headers")
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                keep = value.strip().lower() == b"keep-alive" or (keep and b"close" not in value.lower())
        else:
            raise TransportError(f"an answer with more than {MAX_HEADERS} headers")
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            length, chunked = 0, False
        return PooledAnswer(self, conn, status, None if chunked else length, chunked, keep)


def _chunk_size(line: bytes) -> int:
    if not line:
        raise TransportError("the answer ended before its last chunk")
    return int(line.split(b";", 1)[0].strip(), 16)


def _exactly(rfile: io.BufferedReader, size: int) -> bytes:
    data = rfile.read(size)
    if len(data) != size:
        raise TransportError(f"the answer ended {size - len(data)} bytes into a chunk of {size}")
    return data


def _words(error: BaseException) -> str:
    if isinstance(error, TimeoutError):  # socket.timeout is TimeoutError
        return "timed out"
    if isinstance(error, ssl.SSLError):
        return f"TLS: {error}"
    return str(error) or type(error).__name__
