"""The operator's HTTP/1.1 (``backends.k8s.transport``) against a server on loopback that answers as scripted: a
length, chunks, no length; connections kept alive and reused; one closed by the server while idle (the request
goes again, once); answers cut short, a server that never answers, none listening."""

from __future__ import annotations

import gc
import os
import resource
import socket
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from trainguard.backends.k8s.transport import Pool, Timeouts, TransportError

QUICK = Timeouts(connect=5, read=5)


class Closing(bytes):
    """An answer after which the server closes the connection."""


@dataclass
class Server:
    """Answers each request with the next of ``script`` (raw bytes, or None: close the connection without an
    answer); counts the connections it accepted and the requests it read."""

    script: list[bytes | None]
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as rfile:
            while self.script:
                head = b""
                while (line := rfile.readline()) not in (b"\r\n", b""):
                    head += line
                if not head:
                    return
                length = next(
                    (
                        int(h.split(b":")[1])
                        for h in head.split(b"\r\n")
                        if h.lower().startswith(b"content-length")
                    ),
                    0,
                )
                self.requests.append(head + rfile.read(length))
                answer = self.script.pop(0)
                if answer is None:
                    return
                conn.sendall(answer)
                if isinstance(answer, Closing):
                    return

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[Callable[[list[bytes | None]], tuple[Server, Pool]]]:
    made: list[tuple[Server, Pool]] = []

    def make(script: list[bytes | None]) -> tuple[Server, Pool]:
        server = Server(script)
        made.append((server, Pool(server.url + "/base", None, None, 4)))
        return made[-1]

    yield make
    for server, pool in made:
        pool.close()
        server.close()


def ok(body: bytes, *headers: str) -> bytes:
    lines = ["HTTP/1.1 200 OK", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(*pieces: bytes) -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for piece in pieces:
        out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    return out + b"0\r\n\r\n"


def call(pool: Pool, method: str = "GET", body: bytes | None = None) -> tuple[int, bytes]:
    answer = pool.request(method, "/api?x=1", {"Accept": "application/json"}, body, QUICK)
    try:
        return answer.status, answer.read()
    finally:
        answer.close()


@pytest.mark.parametrize(
    ("answer", "body", "kept"),
    [
        (ok(b'{"a": 1}'), b'{"a": 1}', True),
        (chunked(b'{"a":', b" 1}"), b'{"a": 1}', True),
        # no length: until the server closes
        (Closing(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{}"), b"{}", False),
        (
            Closing(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}"),
            b"{}",
            False,
        ),  # HTTP/1.0 closes unless asked
        (Closing(ok(b"{}", "Connection: close")), b"{}", False),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
        (ok(b'{"kind": "Status"}').replace(b"200 OK", b"404 Not Found"), b'{"kind": "Status"}', True),
    ],
)
def test_an_answer_is_read_whole_and_its_connection_kept_when_it_can_be(
    serve: Callable[[list[bytes | None]], tuple[Server, Pool]], answer: bytes, body: bytes, kept: bool
) -> None:
    server, pool = serve([answer, ok(b"again")])
    status, got = call(pool)
    assert got == body
    assert status == int(answer.split(b" ")[1])
    assert call(pool) == (200, b"again")
    assert server.connections == (1 if kept else 2)
    assert server.requests[0].startswith(b"GET /base/api?x=1 HTTP/1.1\r\nHost: 127.0.0.1:")


def test_a_body_is_sent_with_its_length(serve: Callable[[list[bytes | None]], tuple[Server, Pool]]) -> None:
    server, pool = serve([ok(b"{}")])
    assert call(pool, "POST", b'{"kind": "Pod"}') == (200, b"{}")
    assert b"Content-Length: 15\r\n" in server.requests[0]
    assert server.requests[0].endswith(b'Content-Length: 15\r\n{"kind": "Pod"}')  # its head, then the body


def test_a_kept_connection_the_server_closed_while_idle_is_replaced_and_the_request_sent_once_more(
    serve: Callable[[list[bytes | None]], tuple[Server, Pool]],
) -> None:
    server, pool = serve([ok(b"first"), None, ok(b"second")])
    assert call(pool) == (200, b"first")
    # The server takes the second request and closes without answering (its idle timeout as it arrived).
    assert call(pool, "POST", b"{}") == (200, b"second")
    assert server.connections == 2
    assert len(server.requests) == 3


def test_a_new_connection_closed_without_an_answer_is_an_error(
    serve: Callable[[list[bytes | None]], tuple[Server, Pool]],
) -> None:
    server, pool = serve([None])
    with pytest.raises(TransportError, match="without an answer"):
        call(pool)
    assert server.connections == 1


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\n{}", "8 bytes short"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\n{}",
            "into a chunk",
        ),
        (b"SSH-2.0-OpenSSH\r\n", "not an HTTP answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Len", "within its headers"),
    ],
)
def test_a_broken_answer_is_an_error(
    serve: Callable[[list[bytes | None]], tuple[Server, Pool]], answer: bytes, words: str
) -> None:
    _, pool = serve([Closing(answer)])
    with pytest.raises(TransportError, match=words):
        call(pool)


def test_no_answer_within_the_read_timeout_is_an_error() -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel's backlog) and never answers
    pool = Pool(f"http://127.0.0.1:{listener.getsockname()[1]}", None, None, 4)
    try:
        with pytest.raises(TransportError, match="timed out"):
            pool.request("GET", "/api", {}, None, Timeouts(connect=5, read=0.2))
    finally:
        pool.close()
        listener.close()


def test_no_server_is_an_error() -> None:
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(TransportError, match=f"cannot connect to 127.0.0.1:{port}"):
        Pool(f"http://127.0.0.1:{port}", None, None, 4).request("GET", "/api", {}, None, QUICK)


def test_a_stream_left_before_its_end_does_not_go_back_to_the_pool(
    serve: Callable[[list[bytes | None]], tuple[Server, Pool]],
) -> None:
    server, pool = serve([chunked(b"line 1\n", b"line 2\n"), ok(b"{}")])
    answer = pool.request("GET", "/api/v1/pods?watch=true", {}, None, QUICK)
    assert next(iter(answer.chunks())) == b"line 1\n"
    answer.close()  # the rest of the stream unread: the connection cannot carry another request
    assert call(pool) == (200, b"{}")
    assert server.connections == 2


def test_a_kept_connection_is_reused_whatever_the_descriptors_the_process_holds(
    serve: Callable[[list[bytes | None]], tuple[Server, Pool]],
) -> None:
    """An operator may hold more than 1,024 descriptors (agents' report connections): select() refuses those,
    and a check built on it would open a new connection for every request."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open {hard} descriptors at most")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        server, pool = serve([ok(b"1"), ok(b"2")])
        assert [call(pool), call(pool)] == [(200, b"1"), (200, b"2")]
        assert server.connections == 1
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_pool_or_an_answer_dropped_without_close_closes_its_sockets(
    serve: Callable[[list[bytes | None]], tuple[Server, Pool]],
) -> None:
    """A client dropped without ``close`` (a test's, a verb's) leaves no socket open: the suite turns the
    ResourceWarning of an unclosed one into an error."""
    server, _ = serve([ok(b"1"), chunked(b"a\n", b"b\n")])
    pool = Pool(server.url, None, None, 4)
    assert call(pool) == (200, b"1")  # its connection idle in the pool
    answer = pool.request("GET", "/watch", {}, None, QUICK)  # taken again, and never closed
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        del answer, pool
        gc.collect()
