"""The command's worker events (``trainguard.pod.workerevents``): torchrun's restarts of failed workers, its
rounds forming (no worker runs meanwhile: hang detection holds), and a live job's rounds."""

from __future__ import annotations

from collections.abc import Callable

from trainguard.agent.report import Reporter
from trainguard.agent.watchers.base import Tick
from trainguard.pod import contract
from trainguard.pod.workerevents import (
    FAILED,
    FORMING,
    LIVE_FIELDS,
    LIVE_UNUSED,
    REFORMED,
    SPARES,
    STARTED,
    WorkerEventReader,
    failures_of,
)


class WorkerEventsWatcher:
    def __init__(
        self, path: str, reporter: Reporter, nudged: set[int], hold: Callable[[float], None]
    ) -> None:
        self.reader = WorkerEventReader(path)
        self.reporter = reporter
        #: Workers the agent SIGKILLed for a nudge (``NudgeWatcher``): their ends are left out.
        self.nudged = nudged
        #: Holds hang detection at a time (``HangWatcher.rebase``).
        self.hold = hold
        #: torchrun is forming a round: no worker runs meanwhile.
        self.forming = False

    def start(self, now: float) -> None:
        self.forming = False

    def poll(self, tick: Tick) -> None:
        for record in self.reader.read():
            if record["event"] == FAILED:
                self._workers_restarted(tick, record)
            elif record["event"] in (FORMING, STARTED):
                self.forming = record["event"] == FORMING
                self.hold(tick.now)
            elif record["event"] in (REFORMED, LIVE_UNUSED):
                self._live(tick, record)
            elif record["event"] == SPARES and self.reporter.enabled:
                self.reporter.event(
                    contract.REPORT_SPARES,
                    pid=tick.pid,
                    attempt=tick.attempt,
                    ready=record.get("ready"),
                    wanted=record.get("wanted"),
                )
        if self.forming:
            self.hold(tick.now)  # no worker runs: nothing can hang yet

    def _workers_restarted(self, tick: Tick, record: dict[str, object]) -> None:
        failures = [item for worker, item in failures_of(record) if worker not in self.nudged]
        if not failures or not self.reporter.enabled:
            return
        self.reporter.event(
            contract.REPORT_WORKERS_RESTARTED,
            pid=tick.pid,
            attempt=tick.attempt,
            failed_at=record.get("time"),
            failures=failures,
            restarts_left=record.get("restarts_left"),
            max_restarts=record.get("max_restarts"),
            **({"spare": True} if record.get("spare") is True else {}),
        )

    def _live(self, tick: Tick, record: dict[str, object]) -> None:
        """A live round formed by a worker (``live-reformed``), or a worker that never formed one
        (``live-unused``): reported as written, the worker's pid as ``worker_pid``, ``at`` when it happened."""
        if not self.reporter.enabled:
            return
        line = str(record["event"])
        fields = {key: record.get(key) for key in LIVE_FIELDS[line]}
        if fields.get("at") is None:
            fields["at"] = record.get("time")
        event = contract.REPORT_LIVE_REFORMED if line == REFORMED else contract.REPORT_LIVE_UNUSED
        self.reporter.event(event, pid=tick.pid, attempt=tick.attempt, worker_pid=record.get("pid"), **fields)
