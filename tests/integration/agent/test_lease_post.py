"""One lease renewal on real sockets (``trainguard.agent.lease.post_lease``): an address that never completes a
connection costs ``CONNECT_TIMEOUT``, not the answer's wait, and says that no connection was made (the next renewal
then goes out at once, on a new connection: a Service's replica on a lost node is such an address until the node
is NotReady); a connected operator that answers nothing is waited for ``ANSWER_TIMEOUT``."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator

import pytest
from agent_harness import LeaseOperator

from trainguard.agent import lease
from trainguard.agent.lease import CONNECT_TIMEOUT, Reply, post_lease

pytestmark = pytest.mark.integration


@pytest.fixture
def unanswered_address() -> Iterator[str]:
    """A listening socket whose backlog is full: the kernel drops further SYNs, so a connection never completes,
    as to a pod on a node whose link is down. ``listen(0)`` queues one connection, never accepted here: the
    filler's, once its handshake is done."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.socket()
    filler.setblocking(False)
    filler.connect_ex(("127.0.0.1", port))
    _, connected, _ = select.select([], [filler], [], 10.0)  # a loopback handshake, however busy the machine
    assert connected, "the filler did not connect within 10 s"
    assert filler.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
    try:
        yield f"http://127.0.0.1:{port}/v1/agent-lease"
    finally:
        filler.close()
        listener.close()


def test_an_address_that_never_connects_costs_the_connect_timeout(unanswered_address: str) -> None:
    started = time.monotonic()
    reply = post_lease(unanswered_address, "pod-token")
    took = time.monotonic() - started
    assert (reply.status, reply.connected) == (None, False)
    assert CONNECT_TIMEOUT * 0.9 <= took < lease.ANSWER_TIMEOUT, f"{took:.2f} s"


def test_a_refused_connection_says_no_connection() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    reply = post_lease(f"http://127.0.0.1:{port}/v1/agent-lease", "pod-token")
    assert (reply.status, reply.connected) == (None, False)
    assert "refused" in reply.words


def test_a_bad_url_says_no_connection() -> None:
    reply = post_lease("http://[::1/v1/agent-lease", "pod-token")
    assert (reply.status, reply.connected) == (None, False)


@pytest.mark.parametrize(
    ("status", "reply"),
    [
        (200, Reply(200, "", connected=True)),
        (410, Reply(410, '{"message": "test"}', connected=True)),
        (503, Reply(503, '{"message": "test"}', connected=True)),
    ],
)
def test_an_answer_is_read_with_its_words(status: int, reply: Reply) -> None:
    operator = LeaseOperator(status)
    try:
        assert post_lease(f"{operator.url}?from=test", "pod-token") == reply
        assert (operator.paths, operator.tokens) == (["/v1/agent-lease?from=test"], {"Bearer pod-token"})
    finally:
        operator.stop()


def test_a_connected_operator_that_answers_nothing_is_waited_for_the_answer_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lease, "ANSWER_TIMEOUT", 0.3)
    operator = LeaseOperator(None, hold=1.0)
    try:
        started = time.monotonic()
        reply = post_lease(operator.url, "pod-token")
        took = time.monotonic() - started
        assert (reply.status, reply.connected) == (None, True)
        assert 0.25 <= took < 1.0, f"{took:.2f} s"
    finally:
        operator.stop()
