"""The CLI's side of the local API: find the control plane (starting it when it is not running) and ask it.

Starting is race-free: any number of commands may start a control plane at once; the lock lets exactly one
of them run, the others exit, and every command then talks to the one that runs.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from typing import Any

from trainguard.backends.local import wire
from trainguard.backends.local.home import ENV_HOME, Home

#: Requests that change nothing, so they may be sent again to a restarted control plane.
READ_ONLY = frozenset({"ping", "get", "events", "logs", "nodes", "exists", "metrics"})
#: How long a command waits for a control plane it started to answer.
START_TIMEOUT_SECONDS = 30.0
#: The control plane's exit status when it cannot use its state file (``daemon.UNUSABLE_STATE``).
UNUSABLE_STATE = 2
#: After this long without a control plane process holding the lock, starting it failed.
_STARTUP_GRACE_SECONDS = 10.0


class ClientError(Exception):
    """The control plane refused a request (its message is for the user) or could not be reached."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Client:
    def __init__(self, home: Home | None = None, *, start: bool = True) -> None:
        self.home = home or Home.from_env()
        self._start = start
        self._connection: socket.socket | None = None
        self._reader: Any = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        if self._connection is not None:
            self._connection.close()
        self._connection = self._reader = None

    def call(self, op: str, **args: Any) -> Any:
        """Send one request; returns its result or raises ClientError with the control plane's message."""
        answer = None
        for _ in range(2):
            connection = self._connect()
            try:
                wire.send(connection, {"op": op, "args": args})
                answer = wire.receive(self._reader)
            except (OSError, ValueError):
                answer = None
            if answer is not None:
                break
            self.close()  # the control plane went away (killed): a read is asked again of a new one
            if op not in READ_ONLY:
                raise ClientError(
                    f"the control plane stopped while handling {op!r}; see 'trainguard get' for what happened",
                    1,
                )
        if answer is None:
            raise ClientError(
                f"the control plane keeps closing the connection; see {self.home.control_log}", 1
            )
        if not answer.get("ok"):
            raise ClientError(str(answer.get("error")), int(answer.get("exit_code", 2)))
        return answer.get("result")

    def _connect(self) -> socket.socket:
        if self._connection is not None:
            return self._connection
        connection = self._try_connect()
        if connection is None:
            if not self._start:
                raise ClientError(f"no control plane is running in {self.home.root}", 1)
            connection = self._start_and_connect()
        self._connection = connection
        self._reader = connection.makefile("rb")
        return connection

    def _try_connect(self) -> socket.socket | None:
        if not self.home.socket.exists():
            return None
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with wire.address(self.home.socket) as where:
                connection.connect(where)
        except OSError:
            connection.close()
            return None
        return connection

    def _start_and_connect(self) -> socket.socket:
        start_control_plane(self.home)
        started = time.monotonic()
        while time.monotonic() < started + START_TIMEOUT_SECONDS:
            connection = self._try_connect()
            if connection is not None:
                return connection
            if time.monotonic() > started + _STARTUP_GRACE_SECONDS and control_plane_pid(self.home) is None:
                raise ClientError(f"the control plane did not start: {_tail(self.home)}", 1)
            time.sleep(0.05)
        raise ClientError(
            f"the control plane did not answer within {START_TIMEOUT_SECONDS:.0f} s: {_tail(self.home)}", 1
        )


def start_control_plane(home: Home) -> None:
    """Start ``python -m trainguard.backends.local.daemon``, detached from this process and its terminal.

    A control plane that refuses to start (its state file is damaged, say) exits at once, before detaching,
    having said why in its log: that is raised as a ClientError, in its own words."""
    home.ensure()
    env = {**os.environ, ENV_HOME: str(home.root)}
    with open(home.control_log, "ab") as log:
        said_from = log.seek(0, os.SEEK_END)
        starter = subprocess.Popen(
            [sys.executable, "-m", "trainguard.backends.local.daemon"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(home.root),
            start_new_session=True,
        )
    code = starter.wait()  # it forks the control plane off and exits at once
    if code == UNUSABLE_STATE:  # it said why, for the user
        raise ClientError(_said_since(home, said_from) or _tail(home), code)
    if code != 0:
        raise ClientError(f"the control plane did not start (exit {code}): {_tail(home)}", 1)


def control_plane_pid(home: Home) -> int | None:
    """The pid of the running control plane (from its lock file), or None when it is not running."""
    import psutil

    try:
        text = home.lock_file.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None
    try:
        cmdline = psutil.Process(int(text)).cmdline()
    except psutil.Error:
        return None
    return int(text) if "trainguard.backends.local.daemon" in cmdline else None


def _said_since(home: Home, offset: int) -> str:
    """What the log got from ``offset`` on (a starter's last words), without the "error: " it starts with."""
    try:
        with open(home.control_log, "rb") as log:
            log.seek(offset)
            text = log.read(64 * 1024).decode(errors="replace").strip()
    except OSError:
        return ""
    return text.removeprefix("error: ")


def _tail(home: Home) -> str:
    """The log's last words for a user: its last line that is not part of a traceback, and where the log is
    (TRAINGUARD_DEBUG=1 and the log have the rest)."""
    try:
        lines = home.control_log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return f"no log at {home.control_log}"
    said = [line for line in lines[-40:] if line.strip() and not _TRACEBACK.match(line)]
    return f"{said[-1]} (see {home.control_log})" if said else f"nothing in {home.control_log}"


#: Lines of a Python traceback: its header, and its indented frames and source lines.
_TRACEBACK = re.compile(r'^(Traceback \(most recent call last\):|\s|.*File ".*", line \d+)')
