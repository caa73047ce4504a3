"""A job whose reconcile keeps failing is retried with a backoff of its own (doubling, capped), one log line a
step, and a Warning event on the job; a success starts it from the base again. No cluster: the queue runs on a
fake clock and the operator's API server is a fake that records what it is sent."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from trainguard.backends.k8s.client import ApiError
from trainguard.backends.k8s.kinds import AITRAININGJOB
from trainguard.backends.k8s.operator import Operator
from trainguard.backends.k8s.queue import WorkQueue
from trainguard.controller.retries import BACKOFF_BASE, BACKOFF_MAX

Obj = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_failing_key_backs_off_doubling_up_to_the_cap_and_a_success_resets_it() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock)
    delays = [queue.backoff("job")[1] for _ in range(12)]
    assert delays[:4] == [BACKOFF_BASE, 2 * BACKOFF_BASE, 4 * BACKOFF_BASE, 8 * BACKOFF_BASE]
    assert delays[-1] == BACKOFF_MAX
    assert delays == sorted(delays)
    queue.forget("job")
    assert queue.backoff("job") == (1, BACKOFF_BASE)
    assert queue.backoff("other") == (1, BACKOFF_BASE)  # per key: another job is not held back


def test_a_backed_off_key_is_ready_only_after_its_delay() -> None:
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(clock)
    queue.backoff("job")
    queue.backoff("job")  # the second failure in a row: 2 x the base
    assert queue.get(timeout=0) is None
    clock.now += 2 * BACKOFF_BASE
    assert queue.get(timeout=0) == "job"


class _Jobs:
    def __init__(self, obj: Obj) -> None:
        self.obj = obj

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.obj


class _Kube:
    def __init__(self) -> None:
        self.created: list[tuple[str, Obj]] = []

    def create(self, path: str, body: Obj) -> Obj:
        if any(body["metadata"]["name"] == sent["metadata"]["name"] for _, sent in self.created):
            raise ApiError(409, "AlreadyExists")
        self.created.append((path, body))
        return body


class _Shared:
    identity = "operator-test"


def _operator() -> tuple[Operator, _Kube]:
    """An operator with only what a failed reconcile touches: its queue, job cache, API server and clock."""
    operator = Operator.__new__(Operator)
    kube = _Kube()
    job = {"metadata": {"name": "train", "namespace": "ns", "uid": "uid-1"}}
    operator.queue = WorkQueue(Clock())
    operator.jobs = {AITRAININGJOB.kind: _Jobs(job)}  # type: ignore[dict-item]
    operator.kinds = {AITRAININGJOB.kind: AITRAININGJOB}
    operator.kube = kube  # type: ignore[assignment]
    operator.shared = _Shared()  # type: ignore[assignment]
    operator.clock = lambda: 1_000.0
    return operator, kube


def test_a_failed_reconcile_says_so_on_the_job_and_in_one_line_a_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    operator, kube = _operator()
    key = (AITRAININGJOB.kind, "ns", "train")
    caplog.set_level(logging.WARNING, "trainguard.backends.k8s.operator")
    for _ in range(3):
        try:
            raise RuntimeError("the API server said no")
        except RuntimeError as error:
            operator._failed(key, error)
    lines = [record for record in caplog.records if "reconcile of" in record.getMessage()]
    assert len(lines) == 3  # one a step
    assert lines[0].exc_info is not None  # the traceback once
    assert all(record.exc_info is None for record in lines[1:])
    assert "failed again (3 in a row)" in lines[2].getMessage()
    assert f"trying again in {4 * BACKOFF_BASE:.1f} s" in lines[2].getMessage()
    events = [body for path, body in kube.created if path == "/api/v1/namespaces/ns/events"]
    assert [event["reason"] for event in events] == ["ReconcileFailed"] * 3
    assert {event["type"] for event in events} == {"Warning"}
    assert events[0]["involvedObject"]["uid"] == "uid-1"
    assert "RuntimeError: the API server said no" in events[0]["message"]
    assert f"backs off up to {BACKOFF_MAX:.0f} s" in events[0]["message"]
