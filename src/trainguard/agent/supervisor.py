"""The agent's loop: run the command, watch it for hangs, restart it in place, report what happened.

Every ``poll_interval`` the agent polls its watchers, one per channel (``trainguard.agent.watchers``: fencing's
lease, the control file, nudges, releases, the command's worker events, hang detection), in that order. With
fencing (``trainguard.agent.lease``) the command starts after the lease's first renewal, and a lease that cannot
be confirmed kills the whole tree at once and ends the pod (``EXIT_FENCED``, reason Fenced). On a hang it
stops the tree (SIGTERM and SIGCONT, the grace period,
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
import time
from collections.abc import Callable
from pathlib import Path

from trainguard.agent import tree
from trainguard.agent.checks.readings import Machine, Readings, injected_items
from trainguard.agent.checks.ring import Listener
from trainguard.agent.checks.run import run_check, words
from trainguard.agent.command import WORKER_EVENTS_FILE, Command
from trainguard.agent.config import AgentConfig
from trainguard.agent.detector import Hang, HangStreak
from trainguard.agent.heartbeats import HeartbeatReader
from trainguard.agent.lease import Lease
from trainguard.agent.report import Reporter
from trainguard.agent.upstream import Upstream
from trainguard.agent.watchers.base import ExitRequested, Fenced, Hung, NodeFaulty, Tick, Watcher
from trainguard.agent.watchers.checks import ChecksWatcher
from trainguard.agent.watchers.control import ControlWatcher
from trainguard.agent.watchers.fence import FenceWatcher
from trainguard.agent.watchers.hangs import HangWatcher
from trainguard.agent.watchers.nudges import NudgeWatcher
from trainguard.agent.watchers.rankwork import RankWorkWatcher
from trainguard.agent.watchers.releases import ReleaseWatcher
from trainguard.agent.watchers.workers import WorkerEventsWatcher
from trainguard.pod import checks, contract
from trainguard.pod.hangsignal import HangSignal

#: The agent's exit status when it gave up on a hang: the command was killed (128 + SIGKILL); the report
#: and the termination log say why (``gave-up``, reason ``Hang``).
EXIT_HANG = 137
#: A command that cannot be found or run, as a shell reports it.
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126

_QUIET = {
    HangSignal.HEARTBEAT: "heartbeat",
    HangSignal.LOG: "output",
    HangSignal.CPU: "CPU use",
    HangSignal.IO: "I/O",
}


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        stdout_fd: int = 1,
        stderr_fd: int = 2,
        readings: Readings | None = None,
    ) -> None:
        self.config = config
        #: What the fault tolerance check reads (this machine; a test's recorded readings).
        self._readings = readings or Machine.of_pod()
        self._clock = clock
        self._fds = (stdout_fd, stderr_fd)
        self._streak = HangStreak(config.max_consecutive)
        self._attempt = 0
        self._hang_restarts = 0
        #: The channels the loop polls, in order (``trainguard.agent.watchers``); made when the agent runs.
        self._watchers: list[Watcher] = []
        #: Whether the loop polls at all (a hang timeout, a report, or a file of the runtime's to watch).
        self._watching = False
        #: The bandwidth probe's listener, while the agent runs (``_listen_for_ring``).
        self._ring: Listener | None = None
        #: Fencing's lease with the operator (``--lease-url``), while the agent runs.
        self._lease: Lease | None = None

    def run(self) -> int:
        """Supervise the command until it ends for good; returns the agent's exit status."""
        tree.become_subreaper()
        heartbeat_dir = Path(tempfile.mkdtemp(prefix="trainguard-heartbeats-"))
        upstream = None
        if self.config.report_url is not None and self.config.report_token is not None:
            upstream = Upstream(self.config.report_url, self.config.report_token, self._say)
        reporter = Reporter(self.config.report_file, self.config.termination_log, upstream)
        config = self.config
        if (
            config.lease_url is not None
            and config.fence_after is not None
            and config.report_token is not None
        ):
            self._lease = Lease(
                config.lease_url, config.report_token, config.fence_after, self._say, self._clock
            )
        command = Command(
            self.config.command,
            grace=self.config.grace,
            clock=self._clock,
            say=self._say,
            stdout_fd=self._fds[0],
            stderr_fd=self._fds[1],
        )
        heartbeats = HeartbeatReader(heartbeat_dir)
        self._watchers = self._channels(
            command, heartbeats, reporter, str(heartbeat_dir / WORKER_EVENTS_FILE)
        )
        # Worker events alone wake nobody: they are read when something else is watched.
        self._watching = (
            self._lease is not None
            or config.hang_timeout is not None
            or config.fault_check is not None
            or reporter.enabled
            or config.control_file is not None
            or config.nudge_file is not None
            or config.release_file is not None
        )
        try:
            refused = self._pre_check(reporter)
            if refused is not None:
                return refused
            return self._supervise(command, heartbeats, reporter)
        finally:
            if self._lease is not None:
                self._lease.close()
            command.close()
            reporter.close()
            if self._ring is not None:
                self._ring.close()
            shutil.rmtree(heartbeat_dir, ignore_errors=True)

    def _channels(
        self, command: Command, heartbeats: HeartbeatReader, reporter: Reporter, worker_events: str
    ) -> list[Watcher]:
        """The watchers of this pod's channels, in the order the loop polls them."""
        config = self.config
        hangs = HangWatcher(
            config, self._streak, heartbeats, lambda: command.relay.last_output_at, reporter, self._say
        )
        watchers: list[Watcher] = []
        nudged: set[int] = set()
        if self._lease is not None:
            watchers.append(FenceWatcher(self._lease))
        if config.control_file is not None:
            watchers.append(ControlWatcher(config.control_file, self._say))
        if config.nudge_file is not None:
            nudges = NudgeWatcher(config.nudge_file, reporter, self._say)
            nudged = nudges.nudged
            watchers.append(nudges)
        if config.release_file is not None:
            watchers.append(ReleaseWatcher(config.release_file, reporter, self._say, self._clock))
        watchers += [WorkerEventsWatcher(worker_events, reporter, nudged, hangs.rebase), hangs]
        if config.fault_check is not None:
            watchers.append(ChecksWatcher(config.fault_check, self._readings, reporter))
            if config.fault_check.stragglers:
                watchers.append(RankWorkWatcher(heartbeats, reporter))
        return watchers

    def _check(self, reporter: Reporter, phase: str, pid: int | None) -> checks.CheckResult | None:
        """One check of the node (``trainguard.agent.checks``), reported; None where the check is off."""
        settings = self.config.fault_check
        if settings is None:
            return None
        result = run_check(settings, phase, self._readings, injected_items())
        reporter.event(contract.REPORT_CHECKED, pid=pid, attempt=self._attempt, check=result.as_dict())
        return result

    def _listen_for_ring(self) -> None:
        """The bandwidth probe's listener (``trainguard.agent.checks.ring``), for the pod before this one in its
        ring, from before this pod's own pre-check to the agent's end."""
        settings = self.config.fault_check
        index = getattr(self._readings, "index", None)
        if settings is None or settings.ring is None or index is None or "net.bandwidth" in settings.disabled:
            return
        try:
            self._ring = Listener(settings.ring.port_of(index))
        except OSError as error:
            self._say(f"the bandwidth probe cannot listen on port {settings.ring.port_of(index)}: {error}")

    def _pre_check(self, reporter: Reporter) -> int | None:
        """Before the command's first start: a node that fails the check never runs it; the agent ends the
        pod (``EXIT_CHECK_FAILED``, reason HardwareFault or PreCheckFailed). None: go on."""
        self._listen_for_ring()
        result = self._check(reporter, checks.PRE, None)
        if result is None or result.verdict == checks.OK:
            return None
        hardware = result.verdict == checks.HARDWARE
        self._say(
            f"pre-check failed ({'faulty hardware' if hardware else 'this node cannot run the pod'}): "
            f"{words(result)}; the command is not started"
        )
        reason = checks.REASON_HARDWARE if hardware else checks.REASON_PRE_CHECK
        self._final(reporter, None, checks.EXIT_CHECK_FAILED, None, reason=reason)
        return checks.EXIT_CHECK_FAILED

    def _supervise(self, command: Command, heartbeats: HeartbeatReader, reporter: Reporter) -> int:
        while True:
            self._attempt += 1
            heartbeats.clear()
            oom_before = tree.oom_kills()
            refused = self._await_lease(command, reporter)
            if refused is not None:
                return refused
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
            hung = self._watch(command)
            if isinstance(hung, Fenced):
                self._say(f"fencing: {hung.reason}; ending the command's whole tree")
                command.kill_tree()
                self._final(reporter, pid, contract.EXIT_FENCED, None, reason=contract.REASON_FENCED)
                return contract.EXIT_FENCED
            if isinstance(hung, ExitRequested):
                self._say(f"ending the pod with exit code {hung.exit_code}, as the runtime asked")
                command.stop_tree(force=True)
                self._final(reporter, pid, hung.exit_code, None, injected=True)
                return hung.exit_code
            if isinstance(hung, NodeFaulty):
                self._say(f"periodic check: faulty hardware: {words(hung.result)}; stopping the command")
                command.stop_tree(force=True)
                code = checks.EXIT_CHECK_FAILED
                self._final(reporter, pid, code, None, reason=checks.REASON_HARDWARE)
                return code
            if hung is None:
                command.stop_tree(force=False)  # whatever the command left behind
                code, signame = tree.exit_code(command.status or 0)
                oom = signame == "SIGKILL" and _oom_since(oom_before)
                reason = None
                if code != 0 and not command.stopping:  # was it the hardware? (ModelArts' scenarios 3 and 4)
                    after = self._check(reporter, checks.POST, pid)
                    if after is not None and after.verdict == checks.HARDWARE:
                        self._say(f"post-check: faulty hardware: {words(after)}")
                        reason = checks.REASON_HARDWARE
                self._final(reporter, pid, code, signame, oom=oom, reason=reason)
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

    def _await_lease(self, command: Command, reporter: Reporter) -> int | None:
        """Fencing: the command starts only while the lease is renewed; before the first start, the agent waits
        for the first renewal. The agent's exit status when it must not start (None: start)."""
        lease = self._lease
        if lease is None:
            return None
        said = False
        while not lease.decided and not command.stopping:
            if not said:
                self._say("waiting for the operator to renew this pod's lease before starting the command")
                said = True
            command.pump(0.2)
        if command.stopping:
            code = 128 + int(signal.SIGTERM)
            self._final(reporter, None, code, signal.SIGTERM.name)
            return code
        reason = lease.fenced(self._clock())
        if reason is None:
            return None
        self._say(f"fencing: {reason}; the command is not started")
        self._final(reporter, None, contract.EXIT_FENCED, None, reason=contract.REASON_FENCED)
        return contract.EXIT_FENCED

    def _watch(self, command: Command) -> Hung | ExitRequested | NodeFaulty | Fenced | None:
        """Pump the command until it exits (None), or a watcher ends this run: it hung, or the runtime asks for
        an exit code."""
        started_at = self._clock()
        for watcher in self._watchers:
            watcher.start(started_at)
        next_tick = started_at
        while True:
            command.pump(command.wait_timeout(next_tick if self._watching else None))
            if command.status is not None:
                return None
            now = self._clock()
            if command.stopping or not self._watching or now < next_tick:
                continue
            next_tick = now + self.config.poll_interval
            tick = Tick(now, command.pid, self._attempt)
            for watcher in self._watchers:
                outcome = watcher.poll(tick)
                if outcome is not None:
                    return outcome

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

    def _final(
        self,
        reporter: Reporter,
        pid: int | None,
        code: int,
        signame: str | None,
        oom: bool = False,
        injected: bool = False,
        reason: str | None = None,
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
            **({"reason": reason} if reason is not None else {}),
        )

    def _say(self, message: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self._fds[1], f"[trainguard agent] {message}\n".encode())


def _oom_since(before: int | None) -> bool:
    after = tree.oom_kills()
    return before is not None and after is not None and after > before
