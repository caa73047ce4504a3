"""Example 3 on a private local runtime: the job as the tests run it, the CLI, and waits on what rank 0 reports
(``train_horovod.py --events``: a ``start`` after every (re)start with the world size, ``step``, ``done``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from trainguard.api.load import load_jobs
from trainguard.backends.local.home import ENV_HOME
from trainguard.demo.session import EXAMPLES, Event, Session, events_file

EXAMPLE = EXAMPLES / "horovod"
JOB_FILE = EXAMPLE / "cce-horovod-local.yaml"
SCRIPT = EXAMPLE / "train_horovod.py"
BIN = Path(sys.executable).parent
#: Generous bounds for a busy 2-core machine: horovodrun and each worker import torch (10-40 s under load).
START_TIMEOUT = 150.0
RECOVERY_TIMEOUT = 120.0
#: What the example promises (docs/horovod.md): about 0.97 is usual.
TARGET_ACCURACY = 0.95


def example_job(root: Path, *, epochs: int, step_delay: float) -> dict[str, Any]:
    """Example 3 as written, with this interpreter's horovodrun and python (absolute paths: pods run from
    ``root``), rank 0's progress in ``events_file(root, name)``, and its pace set by the test."""
    [loaded] = load_jobs(JOB_FILE)
    spec = loaded.job.to_dict()
    name = spec["metadata"]["name"]
    roles = spec["spec"]["replicaSpecs"]
    launcher = roles["launcher"]["template"]["spec"]["containers"][0]
    shell_line = launcher["command"][2]
    training = "python examples/horovod/train_horovod.py --epochs=15"
    assert "exec horovodrun " in shell_line, shell_line
    assert shell_line.endswith(training), shell_line
    ours = f"{sys.executable} {SCRIPT} --epochs={epochs} --step-delay={step_delay:g} --events={events_file(root, name)}"
    launcher["command"][2] = shell_line.replace("exec horovodrun ", f"exec {BIN / 'horovodrun'} ").replace(
        training, ours
    )
    trainer = roles["trainer"]["template"]["spec"]["containers"][0]
    assert trainer["command"] == ["python", "-m", "trainguard.backends.local.hosts"], trainer["command"]
    trainer["command"] = [sys.executable, "-m", "trainguard.backends.local.hosts"]
    return spec


def trainguard(session: Session, *argv: str) -> str:
    """``trainguard ARGV`` as a user runs it, against the session's home; its output (fails on an error)."""
    done = subprocess.run(
        [sys.executable, "-m", "trainguard.cli.main", *argv],
        capture_output=True,
        text=True,
        cwd=session.root,
        timeout=60,
        env={**os.environ, ENV_HOME: str(session.home.root)},
    )
    assert done.returncode == 0, f"trainguard {' '.join(argv)}: {done.stderr or done.stdout}"
    return done.stdout


def wait_step(
    session: Session, job: str, *, world: int, after: float = 0.0, timeout: float = START_TIMEOUT
) -> Event:
    """The first step completed by a world of ``world`` workers that (re)started after ``after``; fails early,
    with the job's state, when the job ended first."""

    def found() -> Event | None:
        started = False
        for event in session.run(job).events():
            if event.event == "start" and event.t > after:
                started = event.world == world
            elif event.event == "step" and started:
                return event
        if session.phase(job) in ("Failed", "Succeeded", "Timeout"):
            raise AssertionError(f"{job} ended before {_what(world)}: {brief(session, job)}")
        return None

    return session.wait(f"{_what(world)} of {job}", found, timeout, poll=0.2)


def _what(world: int) -> str:
    return f"a step of a world of {world} workers"


def wait_done(session: Session, job: str, timeout: float = RECOVERY_TIMEOUT) -> Event:
    done = session.wait(f"{job} to finish training", lambda: session.run(job).done(), timeout, poll=0.3)
    session.wait(f"{job} to succeed", lambda: session.phase(job) in ("Succeeded", "Failed"), 60)
    assert session.phase(job) == "Succeeded", brief(session, job)
    return done


def worlds_after(session: Session, job: str, after: float) -> list[int]:
    """The world sizes training ran with after ``after``, in order (each (re)start once)."""
    return [event.world for event in session.run(job).events() if event.event == "start" and event.t > after]


def brief(session: Session, job: str) -> str:
    view = session.view(job)
    pods = ", ".join(f"{p['name']}={p['phase']}/{p['restarts']}" for p in view["status"]["pods"])
    return f"phase {view['status']['phase']} ({view['status'].get('message')}); pods {pods}"


def workers_in(session: Session, job: str, pod: str) -> list[psutil.Process]:
    """The Horovod workers that a trainer pod's host process runs now."""
    pid = session.pods(job)[pod].get("pid")
    if not pid:
        return []
    with contextlib.suppress(psutil.Error):
        return [
            process
            for process in psutil.Process(pid).children(recursive=True)
            if str(SCRIPT) in " ".join(process.cmdline())
        ]
    return []


def leftovers(session: Session) -> list[str]:
    """Processes of the session still alive after it closed (killed, and named, so that the test fails).
    Horovod workers carry the launcher's environment (horovodrun exports it), so they are found too."""
    home = str(session.home.root)
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
                continue
            env: dict[str, Any] = process.environ()
        except psutil.Error:
            continue
        if env.get("TRAINGUARD_REPORT_FILE", "").startswith(home) or env.get(ENV_HOME) == home:
            with contextlib.suppress(psutil.Error):
                found.append(" ".join(process.cmdline()[:5]))
                process.kill()
    return found
