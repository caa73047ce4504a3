"""A job whose reconcile raises on the local runtime is tried again after a backoff of its own, as the
operator does (``trainguard.controller.retries``): one log line a step (the traceback the first time), no
attempt before the delay has passed, at once when its spec changes, and from the base again after a success.

The loop is driven directly (``ControlPlane.step``) on a fake clock, on a store in a temporary home, without a
daemon; the nodes have no free slot, so no process starts. The reconcile is made to fail where the runtime
places the job's pods (the part that would start processes)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainguard.backends.local.home import Home
from trainguard.backends.local.plane import ControlPlane
from trainguard.backends.local.records import JobRecord, NodeRecord
from trainguard.backends.local.service import Service
from trainguard.backends.local.store import Store

from .jobs import SLEEPING, simple_job


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Broken:
    """Stands in for the runtime's ``place_pending`` while ``on``: raises, and counts the attempts."""

    def __init__(self) -> None:
        self.on = True
        self.attempts = 0

    def __call__(self, record: JobRecord, job: object) -> None:
        self.attempts += 1
        if self.on:
            raise RuntimeError("the disk is full\n(and a second line)")


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[tuple[ControlPlane, Service, FakeClock]]:
    home = Home(tmp_path / "home").ensure()
    store = Store(home.state_db)
    clock = FakeClock()
    plane = ControlPlane(home, store, clock, {"PATH": "/usr/bin:/bin"}, max_pods=8)
    service = Service(plane, lambda stop_pods: None)
    service.op_submit(simple_job("a", SLEEPING, 2), str(tmp_path))
    for node in store.list_nodes():  # no room anywhere: no process starts
        store.update_node(NodeRecord(node.name, 0, node.ready, node.version))
    yield plane, service, clock
    plane.stop_all_pods()
    store.close()


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, bool, str]]:
    found = [(r.levelname, r.exc_info is not None, r.getMessage()) for r in caplog.records]
    caplog.clear()
    return [line for line in found if "reconcile of job a" in line[2]]


def test_a_broken_job_backs_off_with_one_line_a_step(
    plane: tuple[ControlPlane, Service, FakeClock], caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    control, service, clock = plane
    broken = Broken()
    control.runtime.place_pending = broken  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, "trainguard.local")

    assert control.step()  # fails: tried again in 0.5 s
    assert _lines(caplog) == [("ERROR", True, "reconcile of job a failed; trying again in 0.5 s")]
    for _ in range(5):  # the loop's next passes, before the delay: not tried, nothing logged
        clock.now += 0.09
        assert control.step()  # still busy: the job is there
    assert (broken.attempts, _lines(caplog)) == (1, [])

    clock.now += 0.06
    control.step()
    assert _lines(caplog) == [
        ("WARNING", False, "reconcile of job a failed again (2 in a row): RuntimeError: the disk is full; "
                           "trying again in 1.0 s"),
    ]  # fmt: skip
    clock.now += 0.9
    control.step()
    assert (broken.attempts, _lines(caplog)) == (2, [])

    # A change of its spec is tried at once, as an edit reaches the operator through its watch.
    service.op_apply(simple_job("a", SLEEPING, 3), str(tmp_path))
    control.step()
    assert broken.attempts == 3
    assert _lines(caplog) == [
        ("WARNING", False, "reconcile of job a failed again (3 in a row): RuntimeError: the disk is full; "
                           "trying again in 2.0 s"),
    ]  # fmt: skip

    # Mended: it runs after its delay, and a later failure backs off from the base again.
    broken.on = False
    clock.now += 2.01
    control.step()
    assert (broken.attempts, _lines(caplog)) == (4, [])
    broken.on = True
    control.step()
    assert _lines(caplog) == [("ERROR", True, "reconcile of job a failed; trying again in 0.5 s")]
