"""The stand-ins for sshd and ssh that let horovodrun reach trainer pods on one machine, and the discovery
script that lists a pod only once its host process is there."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from trainguard.backends.local import discovery
from trainguard.backends.local.hosts import HOSTS_DIR_ENV, host_file
from trainguard.backends.local.hosts.ssh import Invocation, Usage, parse
from trainguard.backends.local.hosts.wire import HostFile
from trainguard.pod.contract import ENV_POD_NAME

pytestmark = pytest.mark.integration

POD = "job-trainer-0"
DEADLINE_S = 30.0


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # What horovodrun runs (horovod/runner/util/remote.py): options, host, more options, one quoted command.
        (
            [
                "-o",
                "PasswordAuthentication=no",
                "-o",
                "StrictHostKeyChecking=no",
                "h-0",
                "-p",
                "22",
                "cd /x ; env A=1 python t.py",
            ],
            Invocation("h-0", "cd /x ; env A=1 python t.py"),
        ),
        (["-oConnectTimeout=5", "user@h-1", "echo", "a", "b"], Invocation("h-1", "echo a b", 5.0)),
        (["-tt", "-i", "key", "h-2", "--", "-x"], Invocation("h-2", "-x")),
        (["-o", "ConnectTimeout 7", "-p22", "h-3", "true"], Invocation("h-3", "true", 7.0)),
    ],
)
def test_ssh_command_lines_parse_as_openssh_reads_them(argv: list[str], expected: Invocation) -> None:
    assert parse(argv) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no host"),
        (["h-0"], "no command"),
        (["-p"], "needs an argument"),
        (["-o", "ConnectTimeout=x", "h", "true"], "seconds"),
    ],
)
def test_ssh_command_lines_it_cannot_run_are_refused(argv: list[str], message: str) -> None:
    with pytest.raises(Usage, match=message):
        parse(argv)


@pytest.fixture
def hosts_dir(tmp_path: Path) -> Path:
    return tmp_path / "hosts"


@pytest.fixture
def host(hosts_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A host process for pod POD, published in ``hosts_dir``; stopped (and checked gone) at teardown."""
    process = start_host(hosts_dir)
    yield process
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=DEADLINE_S)


def start_host(hosts_dir: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, HOSTS_DIR_ENV: str(hosts_dir), ENV_POD_NAME: POD}
    process = subprocess.Popen(
        [sys.executable, "-m", "trainguard.backends.local.hosts"], env=env, stdout=subprocess.DEVNULL
    )
    wait_for(lambda: HostFile.read(host_file(hosts_dir, POD)) is not None, "the host to publish itself")
    return process


def ssh(hosts_dir: Path, *argv: str, timeout: float = DEADLINE_S) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, HOSTS_DIR_ENV: str(hosts_dir)}
    return subprocess.run(
        [sys.executable, "-m", "trainguard.backends.local.hosts", "ssh", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextlib.contextmanager
def background_ssh(hosts_dir: Path, command: str, **popen: Any) -> Iterator[subprocess.Popen[bytes]]:
    """``ssh POD command`` running beside the test; killed and reaped at the end whatever happened (a client
    left running would be reported by its ``Popen`` in a later test)."""
    env = {**os.environ, HOSTS_DIR_ENV: str(hosts_dir)}
    argv = [sys.executable, "-m", "trainguard.backends.local.hosts", "ssh", POD, command]
    client = subprocess.Popen(argv, env=env, **popen)
    try:
        yield client
    finally:
        if client.poll() is None:
            client.kill()
        client.wait(timeout=DEADLINE_S)


def _sleeping(host: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The host's descendants that run ``sleep`` now (a process may end while it is asked)."""
    found = []
    for process in psutil.Process(host.pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.name() == "sleep":
                found.append(process)
    return found


def _ended(process: psutil.Process) -> bool:
    """The process is gone or a zombie (it may end between two questions about it)."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_for(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_command_runs_in_the_pod_with_its_output_and_exit_code_relayed(
    host: subprocess.Popen[bytes], hosts_dir: Path, tmp_path: Path
) -> None:
    done = ssh(
        hosts_dir,
        "-o",
        "StrictHostKeyChecking=no",
        POD,
        f"cd {tmp_path} ; echo out; echo err >&2; pwd; exit 7",
    )

    assert (done.returncode, done.stdout, done.stderr) == (7, f"out\n{tmp_path}\n", "err\n")
    published = HostFile.read(host_file(hosts_dir, POD))
    assert published is not None
    assert host_file(hosts_dir, POD).stat().st_mode & 0o077 == 0  # the token is the owner's alone


def test_a_command_killed_by_a_signal_reads_as_128_plus_the_signal(
    host: subprocess.Popen[bytes], hosts_dir: Path
) -> None:
    assert ssh(hosts_dir, POD, "kill -9 $$").returncode == 128 + signal.SIGKILL


def test_the_command_is_stopped_when_its_ssh_goes_away(
    host: subprocess.Popen[bytes], hosts_dir: Path
) -> None:
    with background_ssh(hosts_dir, "exec sleep 300") as client:
        # The shell becomes sleep (exec): found once it has, among the host's children.
        wait_for(lambda: _sleeping(host), "the command to start")
        [command] = _sleeping(host)
        # In the pod's process group: a pod kill takes it.
        assert os.getpgid(command.pid) == os.getpgid(host.pid)
        client.kill()
        client.wait()
    wait_for(lambda: _ended(command), "the command to stop")


def test_an_unreachable_host_fails_like_ssh_after_the_wait(hosts_dir: Path) -> None:
    started = time.monotonic()
    done = ssh(hosts_dir, "-o", "ConnectTimeout=1", "job-trainer-9", "true")

    assert done.returncode == 255
    assert "job-trainer-9" in done.stderr
    assert time.monotonic() - started < DEADLINE_S


def test_ssh_waits_for_a_pod_that_is_still_starting(hosts_dir: Path) -> None:
    env = {**os.environ, HOSTS_DIR_ENV: str(hosts_dir)}
    client = subprocess.Popen(
        [sys.executable, "-m", "trainguard.backends.local.hosts", "ssh", POD, "echo late"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)  # the client is waiting for the host file; the pod starts after it
    host = start_host(hosts_dir)
    try:
        out, _ = client.communicate(timeout=DEADLINE_S)
        assert (client.returncode, out) == (0, "late\n")
    finally:
        host.terminate()
        host.wait(timeout=DEADLINE_S)


def test_sigterm_stops_the_host_its_commands_and_withdraws_its_file(
    host: subprocess.Popen[bytes], hosts_dir: Path
) -> None:
    with background_ssh(hosts_dir, "exec sleep 300", stderr=subprocess.DEVNULL) as client:
        wait_for(lambda: _sleeping(host), "the command to start")
        host.terminate()

        assert host.wait(timeout=DEADLINE_S) == -signal.SIGTERM
        # The command's SIGTERM reaches the client as 128 + 15, as OpenSSH reports a command killed by a signal.
        assert client.wait(timeout=DEADLINE_S) == 128 + signal.SIGTERM
    assert not host_file(hosts_dir, POD).exists()


def test_a_wrong_token_is_denied(host: subprocess.Popen[bytes], hosts_dir: Path) -> None:
    path = host_file(hosts_dir, POD)
    published = HostFile.read(path)
    assert published is not None
    HostFile(published.port, "0" * 32, published.pid).write(path)

    done = ssh(hosts_dir, "-o", "ConnectTimeout=1", POD, "echo never")

    assert done.returncode == 255
    assert "permission denied" in done.stderr
    assert "never" not in done.stdout


def test_discovery_lists_a_pod_once_its_host_process_is_there(tmp_path: Path) -> None:
    script = tmp_path / "discover_hosts.sh"
    hosts = ["job-trainer-0:1", "job-trainer-1:1"]
    assert discovery.write(script, 1, hosts)

    def listed() -> list[str]:
        return subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout.split()

    assert listed() == hosts  # no host process in the job at all: every running pod
    HostFile(1, "t", 1).write(host_file(tmp_path / "hosts", "job-trainer-1"))
    assert listed() == ["job-trainer-1:1"]
    HostFile(1, "t", 1).write(host_file(tmp_path / "hosts", "job-trainer-0"))
    assert listed() == hosts
