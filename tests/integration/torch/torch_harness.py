"""What the PyTorch integration tests share: waiting on a job's training, finding pods' processes, and a way
to make a pod vanish the way a lost machine does (its connections stay open)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil

from trainguard.demo.session import Event, Session, Timeout

#: Generous bounds for a busy 2-core machine: a cold start of a pod (importing torch) takes 10-40 s there.
START_TIMEOUT = 150.0
RECOVERY_TIMEOUT = 150.0


def wait_step(session: Session, job: str, step: int, timeout: float = START_TIMEOUT) -> Event:
    """The first step event at or past ``step``; fails with the job's state when the job ended or stalled."""

    def reached() -> Event | None:
        last = session.run(job).last_step()
        if last is not None and last.step >= step:
            return last
        if session.phase(job) in ("Failed", "Succeeded", "Timeout"):
            raise AssertionError(
                f"job {job} ended ({session.phase(job)}) before step {step}: {brief(session, job)}"
            )
        return None

    return session.wait(f"step {step} of {job}", reached, timeout, poll=0.2)


def wait_world(
    session: Session, job: str, world: int, after: float, timeout: float = RECOVERY_TIMEOUT
) -> Event:
    """The first step after ``after`` trained by ``world`` workers; fails with what the job did meanwhile."""
    try:
        return session.wait(
            f"a step of {job} with {world} workers",
            lambda: next((e for e in session.run(job).steps() if e.t > after and e.world == world), None),
            timeout,
            poll=0.2,
        )
    except Timeout as timeout_error:
        raise Timeout(
            f"{timeout_error}; {brief(session, job)}; since then: {since(session, job, after)}"
        ) from None


def since(session: Session, job: str, after: float) -> str:
    """The job's worlds and step ranges after ``after``, and its events then (why it did not get further)."""
    runs: list[list[int]] = []  # [world, first step, last step]
    for step in session.run(job).steps():
        if step.t <= after:
            continue
        if runs and runs[-1][0] == step.world:
            runs[-1][2] = step.step
        else:
            runs.append([step.world, step.step, step.step])
    trained = ", ".join(f"world {w}: steps {a}-{b}" for w, a, b in runs) or "no step"
    events = [
        f"{e['time'] - after:+.1f}s {e['reason']} {e['object']}: {e['message']}"
        for e in session.call("events", job=job)
        if e["time"] > after
    ]
    return f"{trained}; events: {events[-15:]}"


def wait_done(session: Session, job: str, timeout: float = RECOVERY_TIMEOUT * 2) -> Event:
    done = session.wait(f"{job} to finish training", lambda: session.run(job).done(), timeout, poll=0.3)
    try:
        session.wait(f"{job} to succeed", lambda: session.phase(job) == "Succeeded", 60)
    except Timeout as timeout_error:  # the workers trained to the end: where do their processes wait?
        waiting = processes(session, job)
        raise Timeout(f"{timeout_error}; {brief(session, job)}; {waiting}; {stacks(session, job)}") from None
    return done


def stacks(session: Session, job: str) -> str:
    """The Python stacks of the workers still there: each is sent SIGABRT, and its faulthandler (the tests'
    pods run with ``PYTHONFAULTHANDLER=1``, see conftest.py) writes every thread's stack into the pod's log."""
    dumped = []
    for name, pod in session.pods(job).items():
        if not pod.get("pid"):
            continue
        with contextlib.suppress(psutil.Error, ValueError):  # ValueError: no single command under the agent
            stuck = workers_of(session, job, name)
            for worker in stuck:
                worker.send_signal(signal.SIGABRT)
            psutil.wait_procs(stuck, timeout=10)
            if stuck:
                tail = session.home.pod_log(job, name).read_text(errors="replace").splitlines()[-40:]
                dumped.append(
                    f"{name} ({len(stuck)} worker(s) sent SIGABRT), its log's end:\n" + "\n".join(tail)
                )
    return "\n".join(dumped) or "no worker left to ask"


def processes(session: Session, job: str) -> str:
    """Each pod's processes under its agent: pid, name, state, threads, and where in the kernel it waits."""
    pods = []
    for name, pod in session.pods(job).items():
        if not pod.get("pid"):
            continue
        described = []
        with contextlib.suppress(psutil.Error):
            agent = psutil.Process(pod["pid"])
            for process in (agent, *agent.children(recursive=True)):
                with contextlib.suppress(psutil.Error, OSError):
                    wchan = Path(f"/proc/{process.pid}/wchan").read_text().strip() or "-"
                    described.append(
                        f"{process.pid} {process.name()} {process.status()} "
                        f"{process.num_threads()} threads, in {wchan}"
                    )
        pods.append(f"{name}: {'; '.join(described) or 'gone'}")
    return "processes: " + " | ".join(pods)


def brief(session: Session, job: str) -> str:
    view = session.view(job)
    pods = ", ".join(f"{p['name']}={p['phase']}/{p['restarts']}" for p in view["status"]["pods"])
    return f"phase {view['status']['phase']}; pods {pods}"


def torchrun_of(session: Session, job: str, pod: str) -> psutil.Process:
    """The pod's command: torchrun's agent, the child of the pod's trainguard agent."""
    pid = session.pods(job)[pod]["pid"]
    [command] = psutil.Process(pid).children()
    return command


def workers_of(session: Session, job: str, pod: str) -> list[psutil.Process]:
    """The pod's workers (``trainguard.agent.nudge.workers``), as psutil processes to signal and wait for."""
    from trainguard.agent.nudge import workers

    found = []
    for worker in workers(torchrun_of(session, job, pod).pid):
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            found.append(psutil.Process(worker.pid))
    return found


# ---- a pod that vanishes without resetting its connections -------------------------------------------------

_SYS_PIDFD_GETFD = 438  # x86_64 and aarch64


class HeldSockets:
    """Duplicates of a process tree's TCP sockets, held by this process: when the tree is killed its
    connections stay open, as those of a machine that lost power do (no FIN, no RST reaches the peers)."""

    def __init__(self) -> None:
        self.fds: list[int] = []

    def take(self, processes: list[psutil.Process]) -> int:
        libc = ctypes.CDLL(None, use_errno=True)
        for process in processes:
            pidfd = os.pidfd_open(process.pid)
            try:
                for number in _sockets_of(process.pid):
                    fd = libc.syscall(_SYS_PIDFD_GETFD, pidfd, number, 0)
                    if fd >= 0:
                        self.fds.append(fd)
            finally:
                os.close(pidfd)
        return len(self.fds)

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


def _sockets_of(pid: int) -> list[int]:
    """The descriptors of a process that are sockets."""
    found = []
    with contextlib.suppress(OSError):
        for name in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    found.append(int(name))
    return found


def can_hold_sockets() -> bool:
    """pidfd_getfd needs Linux >= 5.6 and the right to ptrace our own children."""
    if not hasattr(os, "pidfd_open"):
        return False
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-c", "import socket, time; s = socket.socket(); time.sleep(30)"]
    )
    try:
        deadline = time.monotonic() + 10
        while not _sockets_of(child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        held = HeldSockets()
        try:
            return held.take([psutil.Process(child.pid)]) > 0
        finally:
            held.close()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


# ---- cleanup ---------------------------------------------------------------------------------------------


def leftovers(session: Session) -> list[str]:
    """Processes of the session still alive after it closed (killed, and named, so that the test fails)."""
    home = str(session.home.root)
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
                continue
            env: dict[str, Any] = process.environ()
        except psutil.Error:
            continue
        if env.get("TRAINGUARD_REPORT_FILE", "").startswith(home) or env.get("TRAINGUARD_HOME") == home:
            with contextlib.suppress(psutil.Error):
                found.append(" ".join(process.cmdline()[:5]))
                process.kill()
    return found


def checkpoint_steps(directory: Path) -> list[int]:
    return sorted(int(path.stem.split("-")[1]) for path in directory.glob("ckpt-*.pt"))
