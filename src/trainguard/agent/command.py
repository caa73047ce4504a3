"""One run of the supervised command as a process tree: start it, pump its output and the agent's signals,
reap it, and stop the whole tree.

The command starts in its own session (so its pid is also its process group), with the heartbeat directory
and the attempt number in its environment. Everything happens in the caller's thread: ``pump`` waits on
the command's pipes and on the signal inbox at once.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from trainguard.agent import tree
from trainguard.agent.inbox import FORWARDED, STOPPING, SignalInbox
from trainguard.agent.relay import Relay
from trainguard.pod import contract

#: Where ``trainguard.pod.torchrun`` writes down its worker restarts, in the command's heartbeat directory.
WORKER_EVENTS_FILE = "workers.jsonl"

#: After SIGKILL, how long to wait for the tree to be gone before giving up on stragglers (stuck in the kernel).
_KILL_WAIT = 5.0
_STOP_CHECK_INTERVAL = 0.05
#: How long to keep copying output once the tree is gone (a writer we could not kill must not block us).
_DRAIN_WAIT = 1.0


class Command:
    """The supervised command, run again and again by ``start``. Create and use in the main thread."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        grace: float,
        clock: Callable[[], float],
        say: Callable[[str], None],
        stdout_fd: int = 1,
        stderr_fd: int = 2,
    ) -> None:
        self.argv = list(argv)
        self.grace = grace
        self._clock = clock
        self._say = say
        self.relay = Relay(clock, stdout_fd, stderr_fd)
        self._inbox = SignalInbox()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._inbox.fileno(), selectors.EVENT_READ)
        self.pid: int | None = None
        #: The wait status of the current run once it ended.
        self.status: int | None = None
        #: Set by the first SIGTERM/SIGINT to the agent: the time past which the tree gets SIGKILL.
        self.stop_deadline: float | None = None
        self._killed_for_stop = False

    @property
    def stopping(self) -> bool:
        return self.stop_deadline is not None

    def start(self, heartbeat_dir: Path, attempt: int) -> int:
        """Run the command (again); raises OSError when it cannot be run."""
        env = dict(os.environ)
        env[contract.ENV_HEARTBEAT_DIR] = str(heartbeat_dir)
        env[contract.ENV_ATTEMPT] = str(attempt)
        env[contract.ENV_WORKER_EVENTS] = str(heartbeat_dir / WORKER_EVENTS_FILE)
        # Through a pipe Python would buffer whole blocks of output; the log signal needs it as it is printed.
        env.setdefault("PYTHONUNBUFFERED", "1")
        process = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            preexec_fn=tree.die_with_parent(),  # safe: the agent has a single thread
        )
        if process.stdout is None or process.stderr is None:
            raise RuntimeError("Popen gave no pipes although PIPE was asked for")
        self.relay.attach(os.dup(process.stdout.fileno()), os.dup(process.stderr.fileno()))
        process.stdout.close()
        process.stderr.close()
        # The agent reaps the process itself (it reaps adopted orphans too); this keeps Popen from waiting.
        process.returncode = 0
        for pipe in self.relay.pipes:
            self._selector.register(pipe, selectors.EVENT_READ)
        self.pid, self.status = process.pid, None
        return process.pid

    def pump(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` seconds for output or a signal; handle them, reap, enforce a stop."""
        for key, _ in self._selector.select(timeout):
            if key.fd == self._inbox.fileno():
                for signum in self._inbox.drain():
                    self._on_signal(signum)
            elif not self.relay.pump(key.fd):
                self._selector.unregister(key.fd)
                self.relay.release(key.fd)
        self.reap()
        if (
            self.stop_deadline is not None
            and not self._killed_for_stop
            and self._clock() >= self.stop_deadline
        ):
            self._say("the command outlived the grace period after a stop signal; killing it")
            self.signal_tree(signal.SIGKILL)
            self._killed_for_stop = True

    def wait_timeout(self, until: float | None) -> float | None:
        """How long ``pump`` may wait to be back by ``until`` and by the stop deadline."""
        deadlines = [] if until is None else [until]
        if self.stop_deadline is not None and not self._killed_for_stop:
            deadlines.append(self.stop_deadline)
        return max(0.0, min(deadlines) - self._clock()) if deadlines else None

    def reap(self) -> None:
        statuses = tree.reap()
        if self.pid in statuses:
            self.status = statuses[self.pid]

    def signal_tree(self, signum: int) -> None:
        processes = tree.descendants()
        tree.signal_tree(self.pid, processes, signum)
        if signum != signal.SIGKILL:
            tree.signal_tree(self.pid, processes, signal.SIGCONT)  # a stopped process acts on it once woken

    def kill_tree(self) -> None:
        """End every process of the tree at once (SIGKILL, no grace: fencing); then drain output."""
        self.signal_tree(signal.SIGKILL)
        self._pump_while(self._tree_alive, self._clock() + _KILL_WAIT)
        self.stop_tree(force=False)  # whatever escaped the first SIGKILL, and the output

    def stop_tree(self, *, force: bool) -> None:
        """End every process of the tree: SIGTERM and SIGCONT, the grace period, SIGKILL; then drain output.

        ``force`` stops the command itself (a hang); otherwise only what it left behind when it exited.
        """
        if force or tree.descendants():
            self.signal_tree(signal.SIGTERM)
            self._pump_while(self._tree_alive, self._clock() + self.grace)
            if self._tree_alive():
                self.signal_tree(signal.SIGKILL)
                self._pump_while(self._tree_alive, self._clock() + _KILL_WAIT)
        self._pump_while(lambda: bool(self.relay.pipes), self._clock() + _DRAIN_WAIT)
        for pipe in self.relay.pipes:
            self._selector.unregister(pipe)
        self.relay.close()

    def close(self) -> None:
        self.relay.close()
        self._selector.close()
        self._inbox.close()

    def _pump_while(self, condition: Callable[[], bool], deadline: float) -> None:
        while condition() and self._clock() < deadline:
            self.pump(_STOP_CHECK_INTERVAL)

    def _tree_alive(self) -> bool:
        return self.status is None or bool(tree.descendants())

    def _on_signal(self, signum: int) -> None:
        if signum in FORWARDED and self.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signum)
        if signum in STOPPING and self.stop_deadline is None:
            self.stop_deadline = self._clock() + self.grace
