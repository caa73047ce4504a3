"""Each rank's own work per step (``trainguard.agent.rankwork``): its heartbeats fed to the sampler every poll,
its measure reported every ``REPORT_SECONDS`` (``contract.REPORT_RANKS``), for the controller to find
stragglers among the job's ranks."""

from __future__ import annotations

from trainguard.agent.heartbeats import HeartbeatReader
from trainguard.agent.rankwork import RankWork
from trainguard.agent.report import Reporter
from trainguard.agent.watchers.base import Tick
from trainguard.pod import contract

#: How often the measure is reported (the controller compares the ranks of all pods of the job).
REPORT_SECONDS = 10.0


class RankWorkWatcher:
    def __init__(self, heartbeats: HeartbeatReader, reporter: Reporter, work: RankWork | None = None) -> None:
        self.heartbeats = heartbeats
        self.reporter = reporter
        self.work = work or RankWork()
        self._next_report = 0.0

    def start(self, now: float) -> None:
        self.work.start()  # once: the sampler thread outlives restarts of the command
        self._next_report = now + REPORT_SECONDS

    def poll(self, tick: Tick) -> None:
        beats = self.heartbeats.read()
        self.work.track(
            {rank: (b.sample.pid, b.sample.step, b.sample.written_at) for rank, b in beats.items()}
        )
        if tick.now < self._next_report:
            return
        self._next_report = tick.now + REPORT_SECONDS
        measured = self.work.measured()
        if measured and self.reporter.enabled:
            self.reporter.event(
                contract.REPORT_RANKS,
                pid=tick.pid,
                attempt=tick.attempt,
                ranks=[
                    {
                        "rank": m.rank,
                        "steps": m.steps,
                        "busySeconds": m.busy_seconds,
                        "stepSeconds": m.step_seconds,
                    }
                    for m in measured
                ],
            )
