"""When the operator's workers act (no cluster: caches filled by hand, leadership played by a stand-in): not
before its caches have listed what they watch and it holds the Lease, every job at once when it may, and a
key got meanwhile let go rather than tried again every second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from trainguard.backends.k8s.kinds import PYTORCHJOB
from trainguard.backends.k8s.operator import Operator, Options

Obj = dict[str, Any]
KEY = ("PyTorchJob", "peers", "job-0")


class StandIn:
    """Leadership as a test sets it, signalled as ``LeaderElection`` signals it (``changed``)."""

    def __init__(self) -> None:
        self.leading = False
        self.changed = threading.Event()

    def is_leader(self) -> bool:
        return self.leading

    def take(self) -> None:
        self.leading = True
        self.changed.set()

    def stop(self) -> None:
        pass


@pytest.fixture
def operator() -> Iterator[Operator]:
    made = Operator(object(), Options(namespace="peers", kinds=(PYTORCHJOB,)))  # type: ignore[arg-type]
    made.leader = StandIn()  # type: ignore[assignment]
    made.jobs["PyTorchJob"].put({"metadata": {"namespace": "peers", "name": "job-0", "resourceVersion": "1"}})
    yield made
    made._stop.set()
    made.queue.close()
    made.shared.pool.shutdown(wait=False)


def _acting(operator: Operator) -> threading.Thread:
    thread = threading.Thread(target=operator._act_when_ready, daemon=True)
    thread.start()
    return thread


def test_every_job_is_enqueued_once_synced_and_leading(operator: Operator) -> None:
    thread = _acting(operator)
    operator.leader.take()  # type: ignore[attr-defined]
    assert operator.queue.get(timeout=0.3) is None  # the caches have not listed yet
    for cache in operator.caches:
        cache.synced.set()
    assert operator.queue.get(timeout=10) == KEY
    operator._stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_leadership_taken_later_enqueues_every_job(operator: Operator) -> None:
    for cache in operator.caches:
        cache.synced.set()
    _acting(operator)
    assert operator.queue.get(timeout=0.3) is None  # another replica leads
    operator.leader.take()  # type: ignore[attr-defined]
    assert operator.queue.get(timeout=10) == KEY


def test_a_key_got_while_not_leading_is_let_go(operator: Operator) -> None:
    for cache in operator.caches:
        cache.synced.set()
    worker = threading.Thread(target=operator._work, daemon=True)
    operator.queue.add(KEY)
    worker.start()
    deadline = time.monotonic() + 10
    while len(operator.queue) and time.monotonic() < deadline:  # until the worker has taken it
        time.sleep(0.01)
    assert len(operator.queue) == 0
    # Not tried again a second later (it was, every second, before): taking the lead brings it back.
    assert operator.queue.get(timeout=1.5) is None
    operator._stop.set()
    worker.join(timeout=5)
