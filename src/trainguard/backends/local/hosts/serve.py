"""The host process a Horovod trainer pod runs locally in place of ``sshd``: it runs what the launcher's ssh
asks, as its own child, and streams the output and exit code back (``wire`` says how).

Commands stay in the pod's process group, so whatever kills the pod (a chaos kill, a stop, a lost node) kills
its Horovod worker too. A command whose client goes away is stopped (SIGTERM, then SIGKILL after
``STOP_GRACE_SECONDS``): a worker never outlives the ssh that horovodrun started it with. On SIGTERM the host
stops its commands the same way, withdraws its host file and ends by that signal, as a shell would.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import IO

import psutil

from trainguard.backends.local.hosts import host_file
from trainguard.backends.local.hosts.wire import (
    ACCEPTED,
    DENIED,
    EXIT,
    STDERR,
    STDOUT,
    HostFile,
    Request,
    read_line,
    send_frame,
)

#: How long a stopped command may take to end before it is killed.
STOP_GRACE_SECONDS = 5.0
#: How long a stopping host waits for its sessions to report their commands' exits.
REPORT_SECONDS = 5.0
#: How long a client may take to send its request line.
REQUEST_TIMEOUT_SECONDS = 10.0
LOOPBACK = "127.0.0.1"


class _Stop(Exception):
    """SIGTERM or SIGINT arrived: leave the accept loop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Host:
    def __init__(self, name: str, hosts_dir: Path) -> None:
        self.name = name
        self.path = host_file(hosts_dir, name)
        self.token = secrets.token_hex(16)
        self._commands: set[subprocess.Popen[bytes]] = set()
        #: Guards ``_commands``; notified when a command's session has reported its exit.
        self._changed = threading.Condition()

    def serve(self) -> int:
        listener = socket.create_server((LOOPBACK, 0))
        published = HostFile(listener.getsockname()[1], self.token, os.getpid())
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, _raise_stop)
        published.write(self.path)
        print(f"[host] {self.name}: serving on {LOOPBACK}:{published.port}", flush=True)
        try:
            while True:
                connection, _ = listener.accept()
                threading.Thread(target=self._session, args=(connection,), daemon=True).start()
        except _Stop as stop:
            listener.close()
            self._withdraw(published)
            self._stop_all()
            print(f"[host] {self.name}: stopped by {signal.Signals(stop.signum).name}", flush=True)
            signal.signal(stop.signum, signal.SIG_DFL)
            os.kill(os.getpid(), stop.signum)
            return 128 + stop.signum  # not reached: the signal ends us

    def _session(self, connection: socket.socket) -> None:
        with connection:
            try:
                connection.settimeout(REQUEST_TIMEOUT_SECONDS)
                request = Request.decode(read_line(connection))
                connection.settimeout(None)
            except (OSError, ValueError):
                return
            if not hmac.compare_digest(request.token, self.token) or request.host != self.name:
                with contextlib.suppress(OSError):
                    send_frame(connection, DENIED, f"permission denied on host {self.name}".encode())
                return
            with contextlib.suppress(OSError):
                self._run(connection, request.command)

    def _run(self, connection: socket.socket, command: str) -> None:
        send_frame(connection, ACCEPTED)
        process = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        with self._changed:
            self._commands.add(process)
        try:
            self._relay_until_exit(connection, process)
        finally:
            with self._changed:
                self._commands.discard(process)
                self._changed.notify_all()

    def _relay_until_exit(self, connection: socket.socket, process: subprocess.Popen[bytes]) -> None:
        sending = threading.Lock()
        relays = [
            threading.Thread(target=_relay, args=(stream, kind, connection, sending), daemon=True)
            for stream, kind in ((process.stdout, STDOUT), (process.stderr, STDERR))
        ]
        for relay in relays:
            relay.start()
        finished = threading.Event()
        threading.Thread(target=self._watch, args=(connection, process, finished), daemon=True).start()
        code = process.wait()
        finished.set()
        for relay in relays:
            relay.join()
        with sending:
            send_frame(connection, EXIT, str(128 - code if code < 0 else code).encode())

    def _watch(
        self, connection: socket.socket, process: subprocess.Popen[bytes], finished: threading.Event
    ) -> None:
        """The client sends nothing after its request: anything read (EOF included) means it went away."""
        with contextlib.suppress(OSError):
            connection.recv(1)
        if not finished.is_set():
            print(
                f"[host] {self.name}: the client went away; stopping its command (pid {process.pid})",
                flush=True,
            )
            stop_tree(process)

    def _stop_all(self) -> None:
        """Stop every command, then give their sessions a moment to send the exit codes to their clients."""
        with self._changed:
            running = list(self._commands)
        for process in running:
            stop_tree(process)
        with self._changed:
            self._changed.wait_for(lambda: not self._commands, timeout=REPORT_SECONDS)

    def _withdraw(self, published: HostFile) -> None:
        """Remove our host file, unless a newer host of the same pod replaced it already."""
        if HostFile.read(self.path) == published:
            self.path.unlink(missing_ok=True)


def _relay(stream: IO[bytes] | None, kind: bytes, connection: socket.socket, sending: threading.Lock) -> None:
    """Forward one output stream; after the client is gone, keep draining it so the command never blocks."""
    if stream is None:
        return
    connected = True
    with stream:
        while chunk := os.read(stream.fileno(), 65536):
            if not connected:
                continue
            try:
                with sending:
                    send_frame(connection, kind, chunk)
            except OSError:
                connected = False


def stop_tree(command: subprocess.Popen[bytes]) -> None:
    """SIGTERM a command and everything it started, SIGKILL what is left after the grace period.

    The command itself is waited for through its ``Popen`` only: were psutil to reap it (it waits on children
    with ``waitpid``), the session thread's ``Popen.wait`` would find no child and report exit code 0.
    """
    try:
        descendants = psutil.Process(command.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    with contextlib.suppress(ProcessLookupError):
        command.terminate()
    for process in descendants:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    try:
        command.wait(timeout=STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            command.kill()
    _, alive = psutil.wait_procs(descendants, timeout=max(0.0, deadline - time.monotonic()))
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)


def main(name: str | None, hosts_dir: str | None) -> int:
    from trainguard.backends.local.hosts import HOSTS_DIR_ENV
    from trainguard.pod import contract

    name = name or os.environ.get(contract.ENV_POD_NAME)
    directory = hosts_dir or os.environ.get(HOSTS_DIR_ENV)
    if not name or not directory:
        print(
            f"trainguard host: no pod name or hosts directory ({contract.ENV_POD_NAME}, {HOSTS_DIR_ENV}); the local "
            "runtime sets both for the pods of a Horovod job (frameworkType: horovod), or give --name and "
            "--hosts-dir",
            file=sys.stderr,
        )
        return 2
    return Host(name, Path(directory)).serve()
