"""The operator's Events go out from a thread of their own (``events.EventSender``): a batch hands them over and
goes on; they are sent one after another in the order given, each after the operator's other requests in flight
(for a bounded while); one said before (409) is done; a refusal reaches its callback; past the bound, a new one
is dropped rather than kept (no cluster: the API server is a fake)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from trainguard.backends.k8s.client import Activity, ApiError
from trainguard.backends.k8s.events import EventSender

Obj = dict[str, Any]


class Events:
    """An API server's events endpoint: records what it is sent, answers ``answers[name]`` (an HTTP status,
    201 by default), and holds every request while ``gate`` is closed."""

    def __init__(self, answers: dict[str, int] | None = None) -> None:
        self.sent: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.answers = answers or {}
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()
        #: The operator's other requests in flight through the same connection (``Kube.activity``).
        self.activity = Activity()

    def create(self, path: str, body: Obj) -> Obj:
        assert path == "/api/v1/namespaces/ns/events"
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            assert self.gate.wait(10), "the test never opened the gate"
            name = body["metadata"]["name"]
            with self.lock:
                self.sent.append(name)
            status = self.answers.get(name, 201)
            if status >= 400:
                raise ApiError(status, f"refused {name}")
            return body
        finally:
            with self.lock:
                self.in_flight -= 1


def event(name: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "involvedObject": {"name": "job"},
        "reason": "Test",
        "message": f"event {name}",
    }


@pytest.fixture
def refused() -> list[tuple[str, int]]:
    return []


def test_events_go_out_in_order_one_at_a_time_and_the_caller_does_not_wait(
    refused: list[tuple[str, int]],
) -> None:
    api = Events()
    api.gate.clear()
    sender = EventSender(api)  # type: ignore[arg-type]
    names = [f"e{i}" for i in range(20)]
    for name in names:
        sender.send(event(name), lambda error, name=name: refused.append((name, error.status)))
    # Handed over while the API server holds the first: send never waited for an answer.
    assert not sender.flush(timeout=0.2)
    api.gate.set()
    assert sender.flush(timeout=10)
    assert api.sent == names
    assert api.most_in_flight == 1
    assert refused == []
    sender.close()


@pytest.mark.parametrize(
    ("status", "reaches_callback"),
    [(409, False), (403, True), (422, True), (500, True)],
)
def test_an_event_said_before_is_done_and_a_refused_one_reaches_its_callback(
    status: int, reaches_callback: bool, refused: list[tuple[str, int]]
) -> None:
    api = Events({"bad": status})
    sender = EventSender(api)  # type: ignore[arg-type]
    for name in ("before", "bad", "after"):
        sender.send(event(name), lambda error, name=name: refused.append((name, error.status)))
    assert sender.flush(timeout=10)
    assert api.sent == ["before", "bad", "after"]  # a refusal does not stop the ones after it
    assert refused == ([("bad", status)] if reaches_callback else [])
    sender.close()


def test_past_the_bound_new_events_are_dropped_not_kept(
    refused: list[tuple[str, int]], caplog: pytest.LogCaptureFixture
) -> None:
    api = Events()
    api.gate.clear()
    sender = EventSender(api, pending_max=3)  # type: ignore[arg-type]
    sender.send(event("first"), lambda error: refused.append(("first", error.status)))
    # The first is taken by the sender (and held by the API server); three more fill the queue.
    deadline = time.monotonic() + 10
    while api.in_flight == 0:
        assert time.monotonic() < deadline, "the sender never took the first Event"
        time.sleep(0.01)
    for name in ("a", "b", "c", "dropped"):
        sender.send(event(name), lambda error, name=name: refused.append((name, error.status)))
    assert "dropping job Test (event dropped)" in caplog.text
    api.gate.set()
    assert sender.flush(timeout=10)
    assert api.sent == ["first", "a", "b", "c"]
    sender.close()


def test_an_event_lets_the_requests_in_flight_go_first_for_a_bounded_while() -> None:
    """In a burst the operator's pods go first: an Event waits while another request is in flight, and goes once
    none is; under requests that never stop, it waits no longer than its yield from when it was handed over."""
    api = Events()
    sender = EventSender(api, yield_s=30.0)  # type: ignore[arg-type]
    with api.activity:  # a pod's creation in flight
        sender.send(event("after-the-pod"), lambda error: None)
        assert not sender.flush(timeout=0.3)
        assert api.sent == []
    assert sender.flush(timeout=10)
    assert api.sent == ["after-the-pod"]
    sender.close()

    busy = Events()
    sender = EventSender(busy, yield_s=0.5)  # type: ignore[arg-type]
    with busy.activity:  # requests in flight all along
        handed = time.monotonic()
        sender.send(event("in-time"), lambda error: None)
        assert sender.flush(timeout=10)
        waited = time.monotonic() - handed
    assert busy.sent == ["in-time"]
    assert 0.5 <= waited < 10
    sender.close()


def test_activity_counts_requests_in_flight_and_says_when_none_is() -> None:
    activity = Activity()
    assert activity.wait_quiet(0)
    with activity, activity:
        assert not activity.wait_quiet(0.05)
    assert activity.wait_quiet(0)
    done = threading.Event()

    def one_request() -> None:
        with activity:
            done.wait(10)

    request = threading.Thread(target=one_request)
    request.start()
    deadline = time.monotonic() + 10
    while activity.wait_quiet(0):
        assert time.monotonic() < deadline, "the request never started"
        time.sleep(0.01)
    done.set()
    assert activity.wait_quiet(10)
    request.join(10)
