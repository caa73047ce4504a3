"""Nudges: another pod of the job failed; the workers this pod started before that are SIGKILLed, so that the
command (torchrun's agent) restarts them into a new round."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from trainguard.agent.nudge import Nudge, NudgeWatch, kill_workers_older_than
from trainguard.agent.report import Reporter
from trainguard.agent.watchers.base import Tick
from trainguard.pod import contract


class NudgeWatcher:
    def __init__(self, path: Path, reporter: Reporter, say: Callable[[str], None]) -> None:
        # Read once now: a failure already there when the agent starts is old news.
        self.watch = NudgeWatch(path)
        self.reporter = reporter
        self.say = say
        #: Workers SIGKILLed for a nudge: their ends are no fault of theirs (``WorkerEventsWatcher``).
        self.nudged: set[int] = set()

    def start(self, now: float) -> None:
        pass

    def poll(self, tick: Tick) -> None:
        if tick.pid is None:
            return
        nudge = self.watch.poll()
        if nudge is not None:
            self._nudge(tick, tick.pid, nudge)

    def _nudge(self, tick: Tick, pid: int, nudge: Nudge) -> None:
        killed = kill_workers_older_than(pid, nudge.failed_at)
        self.nudged.update(killed)
        self.reporter.event(
            contract.REPORT_NUDGED, pid=pid, attempt=tick.attempt, token=nudge.token, killed=killed
        )
        age = max(time.time() - nudge.failed_at, 0.0)
        if killed:
            then = (
                f"SIGKILLed its worker(s) {', '.join(map(str, killed))} started before that, so that the "
                "command restarts them into a new round"
            )
        else:
            then = "no worker of the command was started before that: nothing to do"
        self.say(f"nudge {nudge.token}: another pod of the job failed {age:.0f} s ago; {then}")
