"""The agent's loop: run the command, watch it for hangs, restart it in place, report what happened.

Every ``poll_interval`` the agent reads the heartbeats (and, at most once a second, the tree's CPU time) and
feeds them to the ``HangDetector``. On a hang it stops the tree (SIGTERM and SIGCONT, the grace period,
SIGKILL) and runs the same command again, in the same place and with the same environment, until the
``HangStreak`` is spent; then it reports ``gave-up`` with reason Hang and exits ``EXIT_HANG``. It also reports
each restart of failed workers that torchrun carried out inside the command (``trainguard.pod.workerevents``),
except for the workers it killed itself for a nudge; and while torchrun forms a round (no worker runs), it
holds its hang detection, whose timeout starts again once the round's workers are started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainguard.agent import tree
from trainguard.agent.command import WORKER_EVENTS_FILE, Command
from trainguard.agent.config import AgentConfig
from trainguard.agent.control import take_exit_request
from trainguard.agent.detector import Hang, HangDetector, HangStreak, Observation
from trainguard.agent.gpu import GpuSample, Nvml, NvmlUnavailable
from trainguard.agent.heartbeats import Heartbeat, HeartbeatReader
from trainguard.agent.nudge import Nudge, NudgeWatch, kill_workers_older_than
from trainguard.agent.release import (
    QUIET_SECONDS,
    Held,
    Release,
    Released,
    ReleaseWatch,
    release_connections,
    release_lost,
)
from trainguard.agent.report import Reporter
from trainguard.agent.upstream import Upstream
from trainguard.pod import contract
from trainguard.pod.hangsignal import HangSignal
from trainguard.pod.workerevents import (
    FAILED,
    FORMING,
    LIVE_FIELDS,
    LIVE_UNUSED,
    REFORMED,
    STARTED,
    WorkerEventReader,
    failures_of,
)

#: The agent's exit status when it gave up on a hang: the command was killed (128 + SIGKILL); the report
#: and the termination log say why (``gave-up``, reason ``Hang``).
EXIT_HANG = 137
#: A command that cannot be found or run, as a shell reports it.
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126

_CPU_SAMPLE_INTERVAL = 1.0
_PROGRESS_REPORT_INTERVAL = 1.0
_QUIET = {HangSignal.HEARTBEAT: "heartbeat", HangSignal.LOG: "output", HangSignal.CPU: "CPU use"}


@dataclass(frozen=True)
class _Hung:
    hang: Hang
    best_step: int | None


@dataclass(frozen=True)
class _ExitRequested:
    exit_code: int


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        stdout_fd: int = 1,
        stderr_fd: int = 2,
    ) -> None:
        self.config = config
        self._clock = clock
        self._fds = (stdout_fd, stderr_fd)
        self._streak = HangStreak(config.max_consecutive)
        self._attempt = 0
        self._hang_restarts = 0
        self._last_progress: tuple[float, object] | None = None
        self._nudges: NudgeWatch | None = None
        self._releases: ReleaseWatch | None = None
        #: The lost addresses released lately: their unanswered connection attempts are shut down too.
        self._held = Held()
        #: The last release's token (what the held addresses' reports name), and the refusals said already.
        self._held_token = ""
        self._held_refusals: set[str] = set()
        self._worker_events: WorkerEventReader | None = None
        #: Workers SIGKILLed for a nudge: their ends are no fault of theirs.
        self._nudged: set[int] = set()
        #: NVML, loaded on the first CPU sample; False where there is none (no GPU, no driver).
        self._nvml: Nvml | bool | None = None

    def run(self) -> int:
        """Supervise the command until it ends for good; returns the agent's exit status."""
        tree.become_subreaper()
        heartbeat_dir = Path(tempfile.mkdtemp(prefix="trainguard-heartbeats-"))
        upstream = None
        if self.config.report_url is not None and self.config.report_token is not None:
            upstream = Upstream(self.config.report_url, self.config.report_token, self._say)
        reporter = Reporter(self.config.report_file, self.config.termination_log, upstream)
        if self.config.nudge_file is not None:
            # Read once now: a failure already there when the agent starts is old news.
            self._nudges = NudgeWatch(self.config.nudge_file)
        if self.config.release_file is not None:
            self._releases = ReleaseWatch(self.config.release_file)  # the same: a loss known at start is old
        self._worker_events = WorkerEventReader(str(heartbeat_dir / WORKER_EVENTS_FILE))
        command = Command(
            self.config.command,
            grace=self.config.grace,
            clock=self._clock,
            say=self._say,
            stdout_fd=self._fds[0],
            stderr_fd=self._fds[1],
        )
        try:
            return self._supervise(command, HeartbeatReader(heartbeat_dir), reporter)
        finally:
            command.close()
            reporter.close()
            shutil.rmtree(heartbeat_dir, ignore_errors=True)

    def _supervise(self, command: Command, heartbeats: HeartbeatReader, reporter: Reporter) -> int:
        while True:
            self._attempt += 1
            heartbeats.clear()
            oom_before = tree.oom_kills()
            try:
                pid = command.start(heartbeats.directory, self._attempt)
            except OSError as error:
                code = EXIT_NOT_FOUND if isinstance(error, FileNotFoundError) else EXIT_NOT_EXECUTABLE
                self._say(f"cannot run {self.config.command[0]!r}: {error.strerror or error}")
                self._final(reporter, None, code, None)
                return code
            reporter.event(
                contract.REPORT_STARTED, pid=pid, attempt=self._attempt, command=list(self.config.command)
            )
            hung = self._watch(command, heartbeats, reporter)
            if isinstance(hung, _ExitRequested):
                self._say(f"ending the pod with exit code {hung.exit_code}, as the runtime asked")
                command.stop_tree(force=True)
                self._final(reporter, pid, hung.exit_code, None, injected=True)
                return hung.exit_code
            if hung is None:
                command.stop_tree(force=False)  # whatever the command left behind
                code, signame = tree.exit_code(command.status or 0)
                self._final(reporter, pid, code, signame, oom=signame == "SIGKILL" and _oom_since(oom_before))
                return code
            allowed = self._streak.hang(hung.best_step)
            self._on_hang(reporter, pid, hung.hang, allowed)
            command.stop_tree(force=True)
            # A process that even SIGKILL did not end in time (stuck in the kernel) reads as killed.
            status = command.status if command.status is not None else int(signal.SIGKILL)
            code, signame = tree.exit_code(status)
            if command.stopping:  # the agent was told to stop meanwhile: no restart
                self._final(reporter, pid, code, signame)
                return code
            if not allowed:
                reporter.final(
                    contract.REPORT_GAVE_UP,
                    pid=pid,
                    attempt=self._attempt,
                    reason=contract.REASON_HANG,
                    exit_code=EXIT_HANG,
                    hang_restarts=self._hang_restarts,
                )
                return EXIT_HANG
            self._hang_restarts += 1
            reporter.event(
                contract.REPORT_RESTART_IN_PLACE,
                pid=pid,
                attempt=self._attempt,
                consecutive=self._streak.count,
                max_consecutive=self._streak.max_consecutive,
                exit_code=code,
                exit_signal=signame,
            )

    def _watch(
        self, command: Command, heartbeats: HeartbeatReader, reporter: Reporter
    ) -> _Hung | _ExitRequested | None:
        """Pump the command until it exits (None), hangs, or the runtime asks for an exit code."""
        config = self.config
        started_at = self._clock()
        detector = HangDetector(
            timeout=config.hang_timeout,
            signals=config.signals,
            started_at=started_at,
            baseline_step=self._streak.watermark,
        )
        watching = (
            config.hang_timeout is not None
            or reporter.enabled
            or config.control_file is not None
            or self._nudges is not None
            or self._releases is not None
        )
        next_tick = next_cpu = started_at
        self._last_progress = None
        #: torchrun is forming a round (``trainguard.pod.workerevents``): no worker runs meanwhile.
        forming = False
        while True:
            command.pump(command.wait_timeout(next_tick if watching else None))
            if command.status is not None:
                return None
            now = self._clock()
            if command.stopping or not watching or now < next_tick:
                continue
            next_tick = now + config.poll_interval
            if config.control_file is not None:
                request = take_exit_request(config.control_file)
                if isinstance(request, int):
                    return _ExitRequested(request)
                if request is not None:
                    self._say(f"ignoring a request: {request}")
            if self._nudges is not None and command.pid is not None:
                nudge = self._nudges.poll()
                if nudge is not None:
                    self._nudge(reporter, command.pid, nudge)
            if self._releases is not None:
                release = self._releases.poll()
                if release is not None:
                    self._release(reporter, release)
                if self._held.addresses:
                    self._release_attempts(reporter, now)
            if self._worker_events is not None:
                for record in self._worker_events.read():
                    if record["event"] == FAILED:
                        self._workers_restarted(reporter, command.pid, record)
                    elif record["event"] in (FORMING, STARTED):
                        forming = record["event"] == FORMING
                        detector.rebase(now)
                    elif record["event"] in (REFORMED, LIVE_UNUSED):
                        self._live(reporter, command.pid, record)
            if forming:
                detector.rebase(now)  # no worker runs: nothing can hang yet
            beats = heartbeats.read()
            cpu: float | None = None
            gpus: tuple[GpuSample, ...] | None = None
            if (
                config.hang_timeout is not None
                and HangSignal.CPU in config.signals
                and not detector.heartbeats_in_charge
                and now >= next_cpu
            ):
                cpu = tree.cpu_seconds(tree.descendants())
                gpus = self._sample_gpus()
                next_cpu = now + _CPU_SAMPLE_INTERVAL
            assessment = detector.observe(
                Observation(
                    now=now,
                    heartbeats={rank: beat.sample for rank, beat in beats.items()},
                    output_at=command.relay.last_output_at,
                    cpu_seconds=cpu,
                    gpus=gpus,
                )
            )
            if assessment.progressed:
                self._streak.progressed()
            if beats and reporter.enabled:
                self._report_progress(reporter, command.pid, beats, now)
            if assessment.hang is not None:
                return _Hung(assessment.hang, assessment.best_step)

    def _sample_gpus(self) -> tuple[GpuSample, ...] | None:
        """What the pod's devices do (the detector tells a collective's wait from work by them); None where
        NVML is not here."""
        if self._nvml is None:
            try:
                self._nvml = Nvml.load()
            except NvmlUnavailable:
                self._nvml = False
        if not isinstance(self._nvml, Nvml):
            return None
        try:
            return self._nvml.sample_all() or None
        except NvmlUnavailable as error:
            self._say(f"reading the GPUs failed, the CPU alone decides from now on: {error}")
            self._nvml = False
            return None

    def _workers_restarted(self, reporter: Reporter, pid: int | None, record: dict[str, object]) -> None:
        failures = [item for worker, item in failures_of(record) if worker not in self._nudged]
        if not failures or not reporter.enabled:
            return
        reporter.event(
            contract.REPORT_WORKERS_RESTARTED,
            pid=pid,
            attempt=self._attempt,
            failed_at=record.get("time"),
            failures=failures,
            restarts_left=record.get("restarts_left"),
            max_restarts=record.get("max_restarts"),
        )

    def _live(self, reporter: Reporter, pid: int | None, record: dict[str, object]) -> None:
        """A live round formed by a worker (``live-reformed``), or a worker that never formed one
        (``live-unused``): reported as written, the worker's pid as ``worker_pid``, ``at`` when it happened."""
        if not reporter.enabled:
            return
        line = str(record["event"])
        fields = {key: record.get(key) for key in LIVE_FIELDS[line]}
        if fields.get("at") is None:
            fields["at"] = record.get("time")
        event = contract.REPORT_LIVE_REFORMED if line == REFORMED else contract.REPORT_LIVE_UNUSED
        reporter.event(event, pid=pid, attempt=self._attempt, worker_pid=record.get("pid"), **fields)

    def _nudge(self, reporter: Reporter, pid: int, nudge: Nudge) -> None:
        killed = kill_workers_older_than(pid, nudge.failed_at)
        self._nudged.update(killed)
        reporter.event(
            contract.REPORT_NUDGED, pid=pid, attempt=self._attempt, token=nudge.token, killed=killed
        )
        age = max(time.time() - nudge.failed_at, 0.0)
        if killed:
            then = (
                f"SIGKILLed its worker(s) {', '.join(map(str, killed))} started before that, so that the "
                "command restarts them into a new round"
            )
        else:
            then = "no worker of the command was started before that: nothing to do"
        self._say(f"nudge {nudge.token}: another pod of the job failed {age:.0f} s ago; {then}")

    def _release(self, reporter: Reporter, release: Release) -> None:
        """The lost pod's connections now, with the peers' where this pod is still in the lost pod's round
        (``release_lost``); the peers' quiet ones ``QUIET_SECONDS`` later, in a thread of their own so that
        supervision goes on meanwhile."""
        done = release_lost(release.addresses, release.peers)
        self._released(reporter, release.token, release.addresses, done)
        self._held.hold(release.addresses, self._clock())
        self._held_token = release.token
        if release.peers:

            def later() -> None:
                time.sleep(QUIET_SECONDS)
                quiet = release_connections((), release.peers, quiet=QUIET_SECONDS)
                self._released(reporter, release.token, release.peers, quiet, quiet_peers=True)

            threading.Thread(target=later, name="trainguard-release", daemon=True).start()

    def _release_attempts(self, reporter: Reporter, now: float) -> None:
        """The held addresses' connection attempts that go unanswered (``trainguard.agent.release.Held``);
        said only when some were shut down, or for a refusal not said before."""
        held = self._held.addresses
        done = self._held.release(now)
        refused = [reason for reason in done.refused if reason not in self._held_refusals]
        self._held_refusals.update(refused)
        if done.count or refused:
            done.refused = refused
            self._released(reporter, self._held_token, held, done, attempts=True)

    def _released(
        self,
        reporter: Reporter,
        token: str,
        to: tuple[str, ...],
        done: Released,
        *,
        attempts: bool = False,
        quiet_peers: bool = False,
    ) -> None:
        """Report and say what a release did (``attempts``: to the held addresses' connection attempts;
        ``quiet_peers``: to the peers' quiet connections, ``QUIET_SECONDS`` after)."""
        reporter.event(
            "released",
            pid=None,
            attempt=self._attempt,
            token=token,
            addresses=list(to),
            sockets=done.count,
            peer_sockets=0 if quiet_peers else done.peer_sockets,
            refused=done.refused,
            **({"attempts": True} if attempts else {}),
        )
        where = ", ".join(to)
        what = "unanswered connection attempt(s)" if attempts else "connection(s)"
        if done.count:
            pids = ", ".join(f"{pid} ({n})" for pid, n in sorted(done.sockets.items()))
            together = (
                f" ({done.peer_sockets} to the peers with them: this pod left the lost pod's round with them)"
                if done.peer_sockets and not quiet_peers
                else ""
            )
            self._say(f"release {token}: shut down {done.count} {what} to {where}, of {pids}{together}")
        else:
            self._say(f"release {token}: no connection to {where} to shut down")
        if done.refused:
            self._say(f"release {token}: some could not be shut down: {'; '.join(done.refused)}")

    def _on_hang(self, reporter: Reporter, pid: int, hang: Hang, allowed: bool) -> None:
        reporter.event(
            contract.REPORT_HANG,
            pid=pid,
            attempt=self._attempt,
            signal=hang.signal.value,
            idle_seconds=round(hang.idle_seconds, 3),
        )
        streak = self._streak
        then = (
            f"restarting it in place (restart {streak.count} of at most {streak.max_consecutive} in a row)"
            if allowed
            else f"giving up (it hung again after {streak.max_consecutive} restarts in place in a row)"
        )
        self._say(
            f"hang: no {_QUIET[hang.signal]} for {hang.idle_seconds:.1f} s; stopping the command and {then}"
        )

    def _report_progress(
        self, reporter: Reporter, pid: int | None, beats: dict[int, Heartbeat], now: float
    ) -> None:
        key = tuple(sorted((rank, beat.sample) for rank, beat in beats.items()))
        last = self._last_progress
        if last is not None and (last[1] == key or now - last[0] < _PROGRESS_REPORT_INTERVAL):
            return
        first = beats[min(beats)]
        reporter.event(
            contract.REPORT_PROGRESS,
            pid=pid,
            attempt=self._attempt,
            step=first.sample.step,
            rank=first.rank,
            ranks=len(beats),
            metrics=first.metrics,
        )
        self._last_progress = (now, key)

    def _final(
        self,
        reporter: Reporter,
        pid: int | None,
        code: int,
        signame: str | None,
        oom: bool = False,
        injected: bool = False,
    ) -> None:
        reporter.final(
            contract.REPORT_EXITED,
            pid=pid,
            attempt=self._attempt,
            exit_code=code,
            signal=signame,
            oom=oom,
            hang_restarts=self._hang_restarts,
            **({"injected": True} if injected else {}),
        )

    def _say(self, message: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self._fds[1], f"[trainguard agent] {message}\n".encode())


def _oom_since(before: int | None) -> bool:
    after = tree.oom_kills()
    return before is not None and after is not None and after > before
