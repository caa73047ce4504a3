"""A local runtime in a temporary ``TRAINGUARD_HOME`` for a test: the CLI, waits with deadlines, cleanup.

Every test gets its own home, so its control plane, state and pods are its own; ``stop`` shuts the control
plane down with its pods and checks that no process of the home is left behind.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from trainguard.backends.local import processes
from trainguard.backends.local.client import Client, ClientError, control_plane_pid
from trainguard.backends.local.home import ENV_HOME, Home
from trainguard.cli.main import main

#: Pods and control planes started by this harness carry the home in their environment.
_REPORT_ENV = "TRAINGUARD_REPORT_FILE"


@dataclass
class Result:
    code: int
    out: str
    err: str


class LocalRuntime:
    def __init__(self, root: Path) -> None:
        self.home = Home(root / "home")
        self.workdir = root

    # ---- driving ----------------------------------------------------------------------------------

    def cli(self, *argv: str) -> Result:
        """``trainguard ARGV`` in this process (fast); output captured."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _chdir(self.workdir):
            code = main(list(argv))
        return Result(code, out.getvalue(), err.getvalue())

    def cli_process(self, *argv: str, timeout: float = 60) -> Result:
        """``trainguard ARGV`` as its own process, as a user runs it."""
        done = subprocess.run(
            [sys.executable, "-m", "trainguard.cli.main", *argv],
            capture_output=True,
            text=True,
            cwd=self.workdir,
            timeout=timeout,
            env={**os.environ, ENV_HOME: str(self.home.root)},
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def call(self, op: str, **args: Any) -> Any:
        with Client(self.home) as client:
            return client.call(op, **args)

    def write_job(self, spec: dict[str, Any], name: str = "job.yaml") -> Path:
        path = self.workdir / name
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        return path

    def submit(self, spec: dict[str, Any], *extra: str) -> str:
        path = self.write_job(spec)
        result = self.cli("run", str(path), "--detach", *extra)
        assert result.code == 0, result.err
        return str(spec["metadata"]["name"])

    def view(self, job: str) -> dict[str, Any]:
        return dict(self.call("get", job=job))

    def pod(self, job: str, name: str) -> dict[str, Any]:
        return next(pod for pod in self.view(job)["status"]["pods"] if pod["name"] == name)

    def wait(
        self, job: str, condition: Callable[[dict[str, Any]], bool], timeout: float = 30, what: str = ""
    ) -> dict[str, Any]:
        """Poll the job until ``condition(view)`` holds; fail with the last view after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        view = self.view(job)
        while not condition(view):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout} s waiting for {what or condition}: {_brief(view)}"
                )
            time.sleep(0.1)
            view = self.view(job)
        return view

    def wait_running(self, job: str, pods: int, timeout: float = 30) -> dict[str, Any]:
        def all_up(view: dict[str, Any]) -> bool:
            running = [p for p in view["status"]["pods"] if p["phase"] == "Running"]
            return view["status"]["phase"] == "Running" and len(running) == pods

        return self.wait(job, all_up, timeout, f"{pods} pods Running")

    def wait_phase(self, job: str, phase: str, timeout: float = 30) -> dict[str, Any]:
        return self.wait(job, lambda v: v["status"]["phase"] == phase, timeout, f"phase {phase}")

    # ---- looking at processes ---------------------------------------------------------------------

    def control_plane(self) -> int | None:
        return control_plane_pid(self.home)

    def kill_control_plane(self) -> None:
        """kill -9 of the control plane, and wait until it is gone."""
        pid = self.control_plane()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid)

    def pod_processes(self) -> dict[str, list[psutil.Process]]:
        """pod name -> the running agents of this home that run it (more than one would be a duplicate)."""
        found: dict[str, list[psutil.Process]] = {}
        for process, env in self._own_processes():
            marker = env.get("TRAINGUARD_POD_ID")
            if not marker:
                continue
            try:
                command = process.cmdline()
            except psutil.Error:  # exited (or became a zombie) since it was listed
                continue
            if "trainguard.agent" in command:
                found.setdefault(marker.split("/")[1], []).append(process)
        # An agent's child between fork and exec is that agent's command starting, not a second agent.
        return {name: processes.leaders(procs) for name, procs in found.items()}

    def own_commands(self, needle: str) -> list[psutil.Process]:
        """This home's running processes whose command line contains `needle`."""
        found = []
        for process, _ in self._own_processes():
            with contextlib.suppress(psutil.Error):
                if needle in " ".join(process.cmdline()):
                    found.append(process)
        return found

    def _own_processes(self) -> list[tuple[psutil.Process, dict[str, str]]]:
        mine = []
        prefix = str(self.home.root)
        for process in psutil.process_iter():
            try:
                if process.status() == psutil.STATUS_ZOMBIE:
                    continue
                env = process.environ()
            except psutil.Error:
                continue
            if env.get(_REPORT_ENV, "").startswith(prefix) or env.get(ENV_HOME) == prefix:
                mine.append((process, env))
        return mine

    # ---- cleanup ----------------------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Shut the control plane down with its pods; returns what had to be killed by force (leftovers)."""
        pid = self.control_plane()
        if pid is not None:
            with contextlib.suppress(ClientError, OSError), Client(self.home, start=False) as client:
                client.call("shutdown", stop_pods=True)
            _wait_gone(pid)
        # A command SIGKILLed with its agent (directly, or by its parent-death signal) may take a moment to
        # end; what is still there after that is a leftover.
        deadline = time.monotonic() + _DYING_SECONDS
        while time.monotonic() < deadline and any(p.pid != os.getpid() for p, _ in self._own_processes()):
            time.sleep(0.05)
        leftovers = []
        for process, _ in self._own_processes():
            if process.pid == os.getpid():
                continue
            with contextlib.suppress(psutil.Error):
                leftovers.append(" ".join(process.cmdline()[:6]))
                process.kill()
        return leftovers


#: How long a SIGKILLed process may take to end before it counts as left behind.
_DYING_SECONDS = 5.0


def _wait_gone(pid: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} still alive after {timeout} s")


@contextlib.contextmanager
def _chdir(path: Path) -> Any:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def _brief(view: dict[str, Any]) -> str:
    status = view["status"]
    pods = ", ".join(f"{p['name']}={p['phase']}/{p['restarts']}@{p.get('node')}" for p in status["pods"])
    return (
        json.dumps({"phase": status["phase"], "restartCounts": status.get("restartCounts")})
        + f" pods: {pods}"
    )
