"""``python -m trainguard.pod.torchrun --live [torchrun options] SCRIPT [ARGS]``: a pod's workers in live mode.

A job with the annotation ``trainguard.io/live: "true"`` runs its workers under this launcher instead of
torchrun's elastic agent. torchrun's agent restarts every worker of every pod whenever any worker dies or the
membership changes; here the workers form their rounds themselves (``trainguard.Live``, on the job's
rendezvous store), and this launcher only:

- starts ``--nproc-per-node`` workers, each with ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``WORLD_SIZE`` (the
  first round's size: ``TRAINGUARD_LIVE_SIZE``, which trainguard sets from the job's replicas), the store
  (``--rdzv-endpoint``) and the job's key prefix (from ``--rdzv-id``);
- when a worker ends with a failure, marks it gone in the store at once (no round waits for it), writes the
  restart down for the agent (``trainguard.pod.workerevents``: the history shows it), and starts that worker
  alone again while ``--max-restarts`` allows; the others are not touched. A worker that was not restarted
  ends the pod with its exit status;
- on SIGTERM (the pod stopped, e.g. a scale-in), passes it on to the workers and marks each gone as it ends;
- when a worker's script does not use ``trainguard.Live`` (``not_live``: the pod's first incarnation, the
  worker's first start, no round formed, and its stderr ending with the static world's failure: torch's
  ``env://`` rendezvous missing the variables live mode leaves out), writes ``live-unused`` down for the agent
  (the job gets a Warning event) and runs the pod as without live mode: torchrun's elastic agent
  (``trainguard.pod.torchrun``) in its place, with the same options. Any other worker that fails before its
  first round (a replacement that dies starting) is a failure like any other: started again while
  ``--max-restarts`` allows.

Standard library at import (it runs in users' images from the bundle); torch's argument parser and its
store client are imported when it starts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from trainguard.pod import contract, workerevents


class NotLive(Exception):
    """A worker failed before it formed any round: the script does not use live mode."""


#: How often the workers are looked at.
POLL_SECONDS = 0.05
#: What torch says when a script that does not use ``trainguard.Live`` initializes its static world from the
#: environment (``env://``), whose ``RANK``, ``MASTER_ADDR``... live mode leaves out (``contract.STATIC_WORLD``).
STATIC_WORLD_FAILURE = "env:// rendezvous: environment variable"
#: The end of each worker's stderr kept for ``not_live`` (the rest goes on to the pod's stderr as it comes).
KEPT_STDERR = 16 << 10


def not_live(first: bool, formed: bool, stderr_tail: str) -> bool:
    """Whether a worker that failed says its script does not use ``trainguard.Live``: the pod's first
    incarnation and the worker's first start (``first``), no round formed (``formed``), and its stderr showing
    the static world's failure (``STATIC_WORLD_FAILURE``). A replacement or a restart that dies before its first
    round, or a first worker that failed for another reason, is a failure like any other."""
    return first and not formed and STATIC_WORLD_FAILURE in stderr_tail


def worker_env(
    base: dict[str, str], local_rank: int, nproc: int, endpoint: str, run_id: str, size: int, minimum: int
) -> dict[str, str]:
    return {
        **{key: value for key, value in base.items() if key not in contract.STATIC_WORLD},
        contract.LOCAL_RANK: str(local_rank),
        contract.LOCAL_WORLD_SIZE: str(nproc),
        contract.WORLD_SIZE: str(size),
        contract.ENV_LIVE_MINIMUM: str(minimum),
        contract.ENV_LIVE_STORE: endpoint,
        contract.ENV_LIVE_PREFIX: contract.live_prefix(run_id),
        contract.TORCHELASTIC_RUN_ID: run_id,
    }


class Launcher:
    def __init__(self, options: Any, environ: dict[str, str]) -> None:
        self.options = options
        self.nproc = int(options.nproc_per_node) if str(options.nproc_per_node).isdigit() else 1
        self.restarts_left = int(options.max_restarts)
        self.max_restarts = int(options.max_restarts)
        self.endpoint = str(options.rdzv_endpoint)
        self.run_id = str(options.rdzv_id)
        low = int(str(options.nnodes).split(":")[0] or 1)
        self.size = int(environ.get(contract.ENV_LIVE_SIZE) or low * self.nproc)
        self.minimum = int(environ.get(contract.ENV_LIVE_MINIMUM) or max(low, 1) * self.nproc)
        self.environ = environ
        self.events = environ.get(contract.ENV_WORKER_EVENTS)
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        #: Starts of each local rank, and the end of each worker's stderr (by pid).
        self.starts: dict[int, int] = {}
        self.stderr: dict[int, bytearray] = {}
        self.relays: dict[int, threading.Thread] = {}
        #: The pod's incarnation is its first (the control plane's generation 1, or none outside trainguard).
        self.first_incarnation = environ.get(contract.ENV_GENERATION, "1") in ("", "0", "1")
        #: Each worker's member id, taken while it runs (its start time is read from /proc, gone once reaped).
        self.members: dict[int, str] = {}
        self.finished: set[int] = set()
        self._store: Any = None
        self._stopping = False
        self.marks = Path(tempfile.mkdtemp(prefix="trainguard-live-"))

    def command(self) -> list[str]:
        options = self.options
        if options.no_python:
            return [options.training_script, *options.training_script_args]
        module = ["-m"] if options.module else []
        return [sys.executable, "-u", *module, options.training_script, *options.training_script_args]

    def start(self, local_rank: int) -> None:
        env = worker_env(
            self.environ, local_rank, self.nproc, self.endpoint, self.run_id, self.size, self.minimum
        )
        env[contract.ENV_LIVE_MARK] = str(self.marks)
        process = subprocess.Popen(self.command(), env=env, stderr=subprocess.PIPE)
        self.workers[local_rank] = process
        self.members[process.pid] = contract.member_id(process.pid, env)
        self.starts[local_rank] = self.starts.get(local_rank, 0) + 1
        kept = self.stderr[process.pid] = bytearray()
        threading.Thread(
            target=_relay, args=(process, kept), name="trainguard-live-stderr", daemon=True
        ).start()

    def gone(self, pid: int) -> None:
        """What no round must wait for: this pod's worker ``pid`` ended."""
        member = self.members.get(pid) or contract.member_id(pid, self.environ)
        try:
            if self._store is None:
                from torch.distributed import TCPStore  # type: ignore[attr-defined]

                host, _, port = self.endpoint.rpartition(":")
                self._store = TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=30))
            self._store.set(contract.LiveKeys(contract.live_prefix(self.run_id)).gone(member), "1")
        except (RuntimeError, ValueError) as error:  # the others then wait until it is stale
            print(f"trainguard live: could not mark {member} gone: {error}", file=sys.stderr, flush=True)

    def stop(self, signum: int, _frame: Any) -> None:
        self._stopping = True
        for process in self.workers.values():
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        if self.events:
            workerevents.append(self.events, workerevents.STARTED)
        for local_rank in range(self.nproc):
            self.start(local_rank)
        while True:
            for local_rank, process in list(self.workers.items()):
                code = process.poll()
                if code is None or local_rank in self.finished:
                    continue
                self.gone(process.pid)
                if code == 0:
                    self.finished.add(local_rank)
                    continue
                formed = (self.marks / str(process.pid)).exists()
                if process.pid in self.relays:  # its last words, up to its end
                    self.relays.pop(process.pid).join(timeout=2)
                tail = bytes(self.stderr.get(process.pid, b"")).decode(errors="replace")
                first = self.first_incarnation and self.starts.get(local_rank) == 1
                if not self._stopping and not_live(first, formed, tail):
                    if self.events:
                        workerevents.live_unused(
                            self.events,
                            pid=process.pid,
                            local_rank=local_rank,
                            exit_code=code,
                        )
                    self.end(code)
                    raise NotLive(f"worker {local_rank} (pid {process.pid}) ended with {code} in no round")
                if self._stopping or self.restarts_left <= 0:
                    return self.end(code)
                self.restarts_left -= 1
                if self.events:
                    workerevents.append(
                        self.events,
                        workerevents.FAILED,
                        failures=[workerevents.failure(-1, local_rank, process.pid, code)],
                        restarts_left=self.restarts_left,
                        max_restarts=self.max_restarts,
                    )
                self.start(local_rank)
            if len(self.finished) == len(self.workers):
                return 0
            time.sleep(POLL_SECONDS)

    def end(self, code: int) -> int:
        """A worker failed for good (or the pod is stopping): the others are stopped, each marked gone."""
        for local_rank, process in self.workers.items():
            if local_rank in self.finished or process.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
            if process.poll() is None:
                process.kill()
                process.wait()
            self.gone(process.pid)
        return 128 - code if code < 0 else code


def _relay(process: subprocess.Popen[bytes], kept: bytearray) -> None:
    """A worker's stderr passed on to the pod's as it comes, its last ``KEPT_STDERR`` bytes kept."""
    assert process.stderr is not None
    out = sys.stderr.buffer
    for line in iter(process.stderr.readline, b""):
        with contextlib.suppress(OSError, ValueError):
            out.write(line)
            out.flush()
        kept += line
        if len(kept) > KEPT_STDERR:
            del kept[: len(kept) - KEPT_STDERR]


def main(argv: Sequence[str]) -> int:
    from torch.distributed import run as torchrun

    options = torchrun.parse_args(list(argv))  # type: ignore[no-untyped-call]
    launcher = Launcher(options, dict(os.environ))
    try:
        return launcher.run()
    except NotLive as error:
        print(
            f"trainguard live: {error}: the script does not use trainguard.Live; running the workers under "
            "torchrun's elastic agent instead, as without live mode",
            file=sys.stderr,
            flush=True,
        )
    finally:
        shutil.rmtree(launcher.marks, ignore_errors=True)
    os.execv(sys.executable, [sys.executable, "-m", "trainguard.pod.torchrun", *argv])
