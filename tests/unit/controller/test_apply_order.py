"""The one applier hands a batch's pods over before the rest: where a backend has fewer hands than chains, a job's
pods are not created after its Events and its Service, which nothing waits for."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from tests.unit.controller.harness import worker_job
from trainguard.controller import reconcile
from trainguard.controller.apply import apply_actions
from trainguard.controller.backend import (
    Action,
    ActionError,
    EmitEvent,
    IsolateNode,
    LaunchPod,
    NudgeSurvivors,
    Observed,
    ReleaseSurvivors,
    RestartInPlace,
    TerminatePod,
    UpdateDiscovery,
    WriteStatus,
)
from trainguard.controller.status import JobStatus


class OneHand:
    """Verbs that run chains one at a time in the order handed over (a pool of one), recording each call."""

    failures: tuple[type[Exception], ...] = ()

    def __init__(self) -> None:
        self.calls: list[str] = []

    def now(self) -> float:
        return 0.0

    def keep_error(self, error: ActionError) -> None:
        raise AssertionError(error)

    @contextlib.contextmanager
    def batch(self, actions: Sequence[Action]) -> Iterator[None]:
        yield

    def before_launches(self) -> None:
        self.calls.append("before")

    def beside_launches(self) -> Sequence[Callable[[], None]]:
        return (lambda: self.calls.append("service"),)

    def side_by_side(self, chains: Sequence[Callable[[], None]]) -> None:
        for chain in chains:
            chain()

    def launch(self, action: LaunchPod) -> None:
        self.calls.append(f"launch {action.pod}")

    def terminate(self, action: TerminatePod) -> None:
        self.calls.append(f"terminate {action.pod}")

    def restart_in_place(self, action: RestartInPlace) -> None:
        self.calls.append(f"restart {action.pod}")

    def nudge(self, action: NudgeSurvivors) -> None:
        self.calls.append("nudge")

    def release(self, action: ReleaseSurvivors) -> None:
        self.calls.append("release")

    def update_discovery(self, action: UpdateDiscovery) -> None:
        self.calls.append("discovery")

    def isolate_node(self, action: IsolateNode) -> None:
        self.calls.append("isolate")

    def emit_event(self, action: EmitEvent) -> None:
        self.calls.append("event")

    def write_status(self, action: WriteStatus) -> None:
        self.calls.append("status")


def test_a_first_batch_creates_its_pods_before_its_events_and_service() -> None:
    job = worker_job(workers=4)
    actions = reconcile(job, JobStatus(), Observed(), now=1000.0).actions
    assert any(isinstance(a, EmitEvent) for a in actions)
    verbs = OneHand()
    assert not apply_actions(verbs, actions).conflict
    calls = verbs.calls
    launches = [number for number, call in enumerate(calls) if call.startswith("launch ")]
    rest = [number for number, call in enumerate(calls) if call in ("event", "service")]
    assert len(launches) == 5  # the master and 4 workers
    assert calls[:2] == ["status", "before"]
    assert calls[-1] == "status"
    assert max(launches) < min(rest)
