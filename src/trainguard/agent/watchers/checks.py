"""The periodic fault tolerance check (``trainguard.agent.checks``): every ``Settings.period`` seconds while the
command runs, a check of the node in the background (the loop is never held up by it), each result reported
(``contract.REPORT_CHECKED``). A hardware verdict ends this run of the command: ``NodeFaulty``, and the agent
ends the pod with reason ``HardwareFault``; an environment verdict is only reported (a full disk may be freed)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from trainguard.agent.checks.readings import Readings, injected_items
from trainguard.agent.checks.run import run_check
from trainguard.agent.report import Reporter
from trainguard.agent.watchers.base import NodeFaulty, Tick
from trainguard.pod import checks, contract


class ChecksWatcher:
    def __init__(
        self,
        settings: checks.Settings,
        readings: Readings,
        reporter: Reporter,
        injected: Callable[[], frozenset[str]] = injected_items,
    ) -> None:
        self.settings = settings
        self.readings = readings
        self.reporter = reporter
        self.injected = injected
        self._next = 0.0
        self._running: threading.Thread | None = None
        self._result: checks.CheckResult | None = None

    def start(self, now: float) -> None:
        self._next = now + self.settings.period

    def poll(self, tick: Tick) -> NodeFaulty | None:
        if self.settings.period <= 0:
            return None
        running = self._running
        if running is not None and not running.is_alive():
            self._running = None
            result, self._result = self._result, None
            if result is not None:
                self.reporter.event(
                    contract.REPORT_CHECKED, pid=tick.pid, attempt=tick.attempt, check=result.as_dict()
                )
                if result.verdict == checks.HARDWARE:
                    return NodeFaulty(result)
        if self._running is None and tick.now >= self._next:
            self._next = tick.now + self.settings.period
            self._running = threading.Thread(
                target=self._check, name="trainguard-periodic-check", daemon=True
            )
            self._running.start()
        return None

    def _check(self) -> None:
        self._result = run_check(self.settings, checks.PERIODIC, self.readings, self.injected())
