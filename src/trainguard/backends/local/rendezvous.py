"""The rendezvous store of a torchrun job: one small process per job, on the job's loopback port.

torchrun's c10d rendezvous keeps its state in a TCPStore. Left to itself, the first agent to start hosts that
store, so losing that pod (a kill, its node going down) loses the rendezvous of the whole job. Here the
control plane runs the store in a process of its own, placed on no virtual node, and every agent joins it as
a client (``--rdzv-conf is_host=false``, see ``trainguard.controller.torchrun_command``). Like a pod, it runs in its own
session, is written down (``jobs/<job>/rendezvous.json``: pid and start time) and found again by a control plane
that was killed and started anew; it is stopped when the job has ended and its pods are gone.

The process also tends the rendezvous, because it knows what torchrun cannot:

- an agent that died (its process is gone), or whose pod is being stopped (a scale-in, a restart), is dropped at
  once, instead of after torchrun's keep-alive timeout (3 missed beats of 5 s): its last heartbeat is set to the
  epoch, and the agents' own clean-up removes it;
- a round completes as soon as the pods it waits for have joined (see ``Tender``), instead of waiting for
  ``last_call_timeout``: the round's deadline is moved to now, and the agents complete it as usual.

Both edits go through torch's compare-and-swap on the state, as every agent's do. They rely on the state's
layout in torch 2.x (``_RendezvousState``); if it ever differs, the process logs it once and only serves the
store.

    python -m trainguard.backends.local.rendezvous --port P --run-id ID --job NAME --roles worker,master
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import pickle
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psutil

from trainguard.agent.nudge import workers
from trainguard.api import TrainingJob
from trainguard.backends.local import processes
from trainguard.backends.local.home import ENV_HOME, Home
from trainguard.backends.local.podenv import LOOPBACK
from trainguard.backends.local.records import PodState
from trainguard.backends.local.runtime import POD_ID_ENV
from trainguard.controller.torchrun_command import rendezvous, torchrun_roles

log = logging.getLogger("trainguard.local")

#: Marks a store process in its environment: the job's uid.
STORE_ID_ENV = "TRAINGUARD_RDZV_STORE"
#: How often the store process looks at the rendezvous and the job's pods (seconds).
TEND_SECONDS = 0.1
#: A store whose job has ended (or vanished) with no pod left exits after this long on its own.
ORPHAN_EXIT_SECONDS = 60.0
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The incarnation of an agent that trainguard did not start (no pod marker in its environment).
_UNKNOWN = "unknown"


# ---- the control plane's side -----------------------------------------------------------------------------


@dataclass(frozen=True)
class StoreRecord:
    pid: int
    create_time: float
    port: int


class StoreHosts:
    """Starts, finds again and stops the store process of each job that needs one."""

    def __init__(self, home: Home, base_env: Mapping[str, str]) -> None:
        self.home = home
        self.base_env = dict(base_env)
        #: Store processes this control plane started, so that their exits are reaped.
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    @staticmethod
    def needed(job: TrainingJob, port: int) -> bool:
        rdzv = rendezvous(job, f"{LOOPBACK}:{port}")
        return rdzv is not None and rdzv.hosted and bool(torchrun_roles(job))

    def ensure(self, job: TrainingJob, uid: str, port: int) -> None:
        """The job's store runs: the one written down, one found by its marker, or a new one."""
        self._reap()
        if self._find(job.name, uid) is not None:
            return
        rdzv = rendezvous(job, f"{LOOPBACK}:{port}")
        if rdzv is None:
            return
        argv = [
            sys.executable,
            "-m",
            "trainguard.backends.local.rendezvous",
            "--port",
            str(port),
            "--run-id",
            rdzv.run_id,
            "--job",
            job.name,
            "--roles",
            ",".join(torchrun_roles(job)),
        ]
        env = {**self.base_env, STORE_ID_ENV: uid, ENV_HOME: str(self.home.root)}
        started = processes.start(argv, env, None, self._log(job.name))
        self._children[started.pid] = started.process
        self._write(job.name, StoreRecord(started.pid, started.create_time, port))
        log.info("job %s: rendezvous store started on %s:%d (pid %d)", job.name, LOOPBACK, port, started.pid)

    def stop(self, job: str, uid: str) -> None:
        """SIGKILL the job's store (its state is worthless once the job's agents are gone). A store that was
        never written down (its starter was killed at that moment) ends by itself once the job is over."""
        if not self._file(job).exists():
            return
        found = self._find(job, uid)
        if found is not None:
            processes.kill_tree(found)
            with contextlib.suppress(psutil.Error):
                found.wait(5)
        self._reap()
        self._file(job).unlink(missing_ok=True)

    def _find(self, job: str, uid: str) -> psutil.Process | None:
        record = self._read(job)
        if record is not None:
            found = processes.find(record.pid, record.create_time)
            if found is not None:
                return found
        # A control plane killed between starting the store and writing it down left it unrecorded.
        marked = find_store(uid)
        if marked is not None:
            with contextlib.suppress(psutil.Error):
                self._write(job, StoreRecord(marked.pid, marked.create_time(), record.port if record else 0))
        return marked

    def _reap(self) -> None:
        for pid, process in list(self._children.items()):
            if process.poll() is not None:
                del self._children[pid]

    def _file(self, job: str) -> Path:
        return self.home.job_dir(job) / "rendezvous.json"

    def _log(self, job: str) -> Path:
        return self.home.job_dir(job) / "rendezvous.log"

    def _read(self, job: str) -> StoreRecord | None:
        try:
            data = json.loads(self._file(job).read_text())
            return StoreRecord(int(data["pid"]), float(data["create_time"]), int(data["port"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _write(self, job: str, record: StoreRecord) -> None:
        path = self._file(job)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(record.__dict__))
        os.replace(temporary, path)


def find_store(uid: str) -> psutil.Process | None:
    """The store process whose environment carries ``TRAINGUARD_RDZV_STORE=<uid>``."""
    for process in psutil.process_iter(["cmdline"]):
        try:
            cmdline = process.info.get("cmdline") or []
            if "trainguard.backends.local.rendezvous" not in cmdline:
                continue
            if process.status() != psutil.STATUS_ZOMBIE and process.environ().get(STORE_ID_ENV) == uid:
                return process
        except psutil.Error:
            continue
    return None


# ---- the store process ------------------------------------------------------------------------------------


class Tender:
    """Drops dead agents and completes rounds early; one ``tend()`` per look at the rendezvous state.

    A round completes early once every pod it waits for has joined: in the job's first round, every pod the
    control plane runs; later, every running pod whose agent has been in the rendezvous before. A pod that is
    new (scaled out) or replaced (a new incarnation, still importing torch) does not hold the others back: they
    train on, and it joins the next round, which its arrival starts.
    """

    def __init__(self, backend: Any, pods: JobPods, host: str) -> None:
        self.backend = backend
        self.pods = pods
        self.host = host
        self.broken = False
        #: Pod incarnations ("<pod>/<launch>") whose agent has been seen in the rendezvous.
        self.seen: set[str] = set()
        self.completed_once = False

    def tend(self) -> bool:
        """One look; True when it changed the state."""
        if self.broken:
            return False
        try:
            return self._tend()
        except (pickle.UnpicklingError, AttributeError, TypeError, ImportError) as error:
            log.warning(
                "the rendezvous state is not laid out as expected (%s); only serving the store", error
            )
            self.broken = True
            return False

    def _tend(self) -> bool:
        found = self.backend.get_state()
        if found is None:
            return False
        bits, token = found
        state = pickle.loads(bits)
        now = datetime.now(timezone.utc)
        changed = False
        incarnation: dict[Any, str | None] = {}
        running = self.pods.running()
        for node, beat in state.last_heartbeats.items():
            if node.addr != self.host:
                continue
            incarnation[node] = _incarnation(node.pid)
            name = incarnation[node]
            # Gone: its agent died, or trainguard is stopping its pod (a scale-in, a restart) and its workers have
            # ended (having saved on SIGTERM): the agent itself takes seconds more to exit, holding the next
            # round back meanwhile.
            stopping = (
                name is not None
                and running is not None
                and name != _UNKNOWN
                and name not in running
                and not workers(node.pid)
            )
            if (name is None or stopping) and beat > _EPOCH:
                log.info(
                    "round %d: agent %s is %s; dropping it", state.round, node, "stopping" if name else "gone"
                )
                state.last_heartbeats[node] = _EPOCH
                changed = True
        self.seen.update(name for name in incarnation.values() if name)
        self.completed_once = self.completed_once or state.complete or state.round > 0
        if not state.complete and not state.closed and state.deadline is not None and state.deadline > now:
            alive = running or set()
            waited_for = alive if not self.completed_once else alive & self.seen
            joined = {incarnation.get(node) for node in state.participants}
            if waited_for and waited_for <= joined:
                log.info("round %d: %s joined; completing it", state.round, ", ".join(sorted(waited_for)))
                state.deadline = now - timedelta(seconds=1)
                changed = True
        if changed:
            self.backend.set_state(pickle.dumps(state), token)
        return changed


def _incarnation(pid: int) -> str | None:
    """The pod incarnation ("<pod>/<launch>") of a running agent process, or None when it is gone."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        marker = process.environ().get(POD_ID_ENV, "")
    except psutil.Error:
        return None
    _, _, incarnation = marker.partition("/")
    return incarnation or _UNKNOWN


class JobPods:
    """The job's torchrun pods that the control plane runs now, read from the local state."""

    def __init__(self, home: Home, job: str, roles: set[str]) -> None:
        from trainguard.backends.local.store import Store

        self.store = Store(home.state_db)
        self.job = job
        self.roles = roles
        self._gone_since: float | None = None

    def running(self) -> set[str] | None:
        """Incarnations ("<pod>/<launch>") of the job's torchrun pods that are starting or running."""
        try:
            pods = self.store.list_pods(self.job)
        except (sqlite3.Error, OSError) as error:  # a busy or vanished state file: no early completion now
            log.warning(
                "job %s: could not list its pods (%s); the round completes by its own timeout",
                self.job,
                error,
            )
            return None
        return {
            f"{pod.name}/{pod.launch}"
            for pod in pods
            if pod.role in self.roles and pod.state in (PodState.LAUNCHING, PodState.RUNNING)
        }

    def orphaned(self, now: float) -> bool:
        """True once the job has been gone, or has had no pod alive, for ORPHAN_EXIT_SECONDS."""
        try:
            record = self.store.get_job(self.job)
            alive = record is not None and any(pod.alive for pod in self.store.list_pods(self.job))
        except (sqlite3.Error, OSError) as error:  # busy or vanishing: taken as alive, asked again next tick
            log.warning(
                "job %s: could not read the job's state (%s); the store keeps serving", self.job, error
            )
            return False
        if alive:
            self._gone_since = None
            return False
        self._gone_since = self._gone_since if self._gone_since is not None else now
        return now - self._gone_since >= ORPHAN_EXIT_SECONDS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainguard.backends.local.rendezvous")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--roles", default="")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)

    from torch.distributed import TCPStore  # type: ignore[attr-defined]
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend

    store = TCPStore(
        LOOPBACK, args.port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60)
    )
    log.info("rendezvous store of job %s serving on %s:%d", args.job, LOOPBACK, args.port)
    pods = JobPods(Home.from_env(), args.job, {role for role in args.roles.split(",") if role})
    tender = Tender(C10dRendezvousBackend(store, args.run_id), pods, socket.getfqdn())
    failures = 0
    while not pods.orphaned(time.monotonic()):
        try:
            tender.tend()
        except Exception as error:  # the store busy, a process gone while looked at: try again next tick
            failures += 1
            if failures in (1, 10, 100, 1000):
                log.warning("could not tend the rendezvous (%d times): %r", failures, error)
        time.sleep(TEND_SECONDS)
    log.info("job %s has ended; the rendezvous store exits", args.job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
