"""``ssh`` for the launcher pod of a local Horovod job: ``ssh [options] HOST COMMAND`` runs COMMAND through
HOST's host process (``serve``), relays its output and exits with its exit code.

OpenSSH's command line is accepted as horovodrun writes it (options before and after the host, ``-o K=V``,
``-p``, ``-i``, ...); only ``ConnectTimeout`` means something here: how long to wait for the host process to
publish itself and answer, since a pod being (re)started comes up within seconds (default
``TRAINGUARD_SSH_WAIT_SECONDS``, else 30). Like OpenSSH, it exits 255 when the host cannot be reached or the
connection drops, and a command killed by signal N reads as exit 128+N.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from trainguard.backends.local.hosts import HOSTS_DIR_ENV, host_file
from trainguard.backends.local.hosts.wire import (
    ACCEPTED,
    DENIED,
    EXIT,
    STDERR,
    STDOUT,
    Disconnected,
    HostFile,
    Request,
    read_frame,
)

#: OpenSSH's exit status when it cannot connect or the connection breaks.
SSH_ERROR = 255
WAIT_ENV = "TRAINGUARD_SSH_WAIT_SECONDS"
DEFAULT_WAIT_SECONDS = 30.0
#: OpenSSH's options that take an argument (``ssh -o X``, ``ssh -oX``); every other letter is a flag.
_WITH_ARGUMENT = frozenset("BbcDEeFIiJLlmOopQRSWw")
_RETRY_SECONDS = 0.1


class Usage(ValueError):
    """A command line this stand-in cannot run."""


@dataclass(frozen=True)
class Invocation:
    host: str
    command: str
    connect_timeout: float | None = None


def parse(argv: list[str]) -> Invocation:
    """OpenSSH's ``[options] [user@]host [options] command...``: options may also follow the host."""
    host: str | None = None
    options: list[str] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            index += 1
            break
        if word.startswith("-") and len(word) > 1:
            index = _take_option(argv, index, options)
            continue
        if host is not None:
            break
        host = word
        index += 1
    if host is None:
        raise Usage("no host given")
    command = " ".join(argv[index:])
    if not command.strip():
        raise Usage(f"no command for {host}: this stand-in runs commands, it opens no interactive shell")
    timeout = None
    for option in options:
        key, _, value = option.replace(" ", "=", 1).partition("=")
        if key.lower() == "connecttimeout":
            try:
                timeout = float(value)
            except ValueError as error:
                raise Usage(f"-o {option}: ConnectTimeout takes seconds") from error
    return Invocation(host.rpartition("@")[2], command, timeout)


def _take_option(argv: list[str], index: int, options: list[str]) -> int:
    """Consume the option word at ``index`` (and its argument); ``-o`` values go into ``options``."""
    word = argv[index]
    for position in range(1, len(word)):
        letter = word[position]
        if letter not in _WITH_ARGUMENT:
            continue
        value = word[position + 1 :]
        if not value:
            if index + 1 >= len(argv):
                raise Usage(f"option -{letter} needs an argument")
            index += 1
            value = argv[index]
        if letter == "o":
            options.append(value)
        break
    return index + 1


def run(invocation: Invocation, hosts_dir: Path, wait_seconds: float) -> int:
    connection, problem = _connect(invocation, hosts_dir, time.monotonic() + wait_seconds)
    if connection is None:
        _say(f"connect to host {invocation.host}: {problem} within {wait_seconds:g} s")
        return SSH_ERROR
    with connection:
        try:
            while True:
                kind, payload = read_frame(connection)
                if kind == STDOUT:
                    _write(sys.stdout.buffer, payload)
                elif kind == STDERR:
                    _write(sys.stderr.buffer, payload)
                elif kind == EXIT:
                    return int(payload)
        except Disconnected:
            _say(f"Connection to {invocation.host} closed by remote host.")
            return SSH_ERROR


def _connect(invocation: Invocation, hosts_dir: Path, deadline: float) -> tuple[socket.socket | None, str]:
    """A connection whose host accepted our request, or None and why, past the deadline: until then a host
    that is not there yet (its pod is starting or restarting) is tried again."""
    path = host_file(hosts_dir, invocation.host)
    problem = f"no trainguard host process published itself ({path})"
    while True:
        published = HostFile.read(path)
        if published is not None:
            connection, problem = _try(published, invocation)
            if connection is not None:
                return connection, ""
        if time.monotonic() >= deadline:
            return None, problem
        time.sleep(_RETRY_SECONDS)


def _try(published: HostFile, invocation: Invocation) -> tuple[socket.socket | None, str]:
    try:
        connection = socket.create_connection(("127.0.0.1", published.port), timeout=5)
    except OSError as error:  # a host file left by an incarnation of the pod that is gone
        return None, f"its host process did not answer on port {published.port} ({error.strerror or error})"
    try:
        connection.sendall(Request(published.token, invocation.host, invocation.command).encode())
        kind, payload = read_frame(connection)
    except (OSError, Disconnected) as error:
        connection.close()
        return None, f"its host process closed the connection ({error})"
    if kind != ACCEPTED:
        connection.close()
        reason = payload.decode(errors="replace") if kind == DENIED else "not a trainguard host process"
        return None, f"port {published.port}: {reason}"
    connection.settimeout(None)
    return connection, ""


def _write(stream: BinaryIO, payload: bytes) -> None:
    stream.write(payload)
    stream.flush()


def _say(message: str) -> None:
    print(f"ssh: {message}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    try:
        invocation = parse(argv)
    except Usage as error:
        _say(f"{error} (trainguard's ssh stand-in for local Horovod jobs)")
        return SSH_ERROR
    directory = os.environ.get(HOSTS_DIR_ENV)
    if not directory:
        _say(f"{HOSTS_DIR_ENV} is not set: the local runtime sets it for the pods of a Horovod job")
        return SSH_ERROR
    wait = invocation.connect_timeout
    if wait is None:
        wait = float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_SECONDS))
    return run(invocation, Path(directory), wait)
