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
- with hot spares (``TRAINGUARD_LIVE_SPARES``, the job's ``trainguard.io/live-spares``), starts that many more
  workers after them, each in a slot (``LOCAL_RANK``) of its own: a spare warms up and waits, holding no rank
  (``trainguard.sdk._spare``); when a worker fails, the launcher calls a spare in its place at once (the spare
  arrives in the next round already warm) and starts the failed worker's slot again as the next spare, so the
  pod keeps its number of spares; when every worker is done, the spares are released;
- on SIGTERM (the pod stopped, e.g. a scale-in), passes it on to the workers and marks each gone as it ends;
- when a worker's script does not use ``trainguard.Live`` (``without_live``: its first start, in a job where no
  round ever formed, failed before it formed one, and its stderr shows the static world's variables missing:
  ``contract.STATIC_WORLD``, unset in live mode), writes ``live-unused`` down for the agent (the job gets a
  Warning event) and runs the pod as without live mode: torchrun's elastic agent (``trainguard.pod.torchrun``)
  in its place, with the same options. Any other failure before a round (a replacement's, a restart's, one
  with the store away) is a worker's failure as any other: that worker alone is started again.

Each worker's member id (``contract.member_id``: its pod, pid and start) is taken as it starts, while its
``/proc`` entry is there: the same id the worker's ``Live`` computes, under which it is marked gone.

Standard library at import (it runs in users' images from the bundle); torch's argument parser and its
store client are imported when it starts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from trainguard.pod import contract, workerevents


class NotLive(Exception):
    """A worker failed before it formed any round: the script does not use live mode."""


#: How often the workers are looked at.
POLL_SECONDS = 0.05
#: How much of a first start's stderr is kept to judge its failure by, and how long its last lines are waited for.
TAIL_BYTES = 16384
TAIL_WAIT_SECONDS = 2.0
#: A static world's variable missing, as torch's ``env://`` rendezvous (``init_process_group``'s default) says
#: it, or as a script that reads it itself fails (``os.environ["RANK"]``).
_MISSING = re.compile(
    r"environment variable (?P<torch>{names}) expected, but not set|KeyError: '(?P<script>{names})'".format(
        names="|".join(contract.STATIC_WORLD)
    )
)


def missing_static_world(stderr: str) -> str | None:
    """The static world's variable (``contract.STATIC_WORLD``) that a worker's stderr says it failed without."""
    found = _MISSING.search(stderr)
    return None if found is None else found.group("torch") or found.group("script")


def without_live(restarted: bool, formed: bool, latest_round: int | None, stderr: str) -> str | None:
    """Whether a worker that failed shows that the script does not use ``trainguard.Live``: the static world's
    variable it failed without, or None. Only a first start (``restarted``: this launcher started it again
    before), that formed no round, in a job where none formed (``latest_round``: the store's latest round;
    None when the store could not say), and whose stderr says it missed a static world's variable. A script
    that uses ``Live`` never reads them; any other early failure is a worker's own."""
    if restarted or formed or latest_round != 0:
        return None
    return missing_static_world(stderr)


def started_as_spare(pid: int) -> bool:
    """Whether the process was started as a hot spare: its pipe named in the environment it started with,
    which ``/proc`` keeps (the spare drops it from its own once it waits); False where it cannot be read."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return any(item.startswith(f"{contract.ENV_LIVE_SPARE_FD}=".encode()) for item in raw.split(b"\0"))


class Tail:
    """A worker's stderr passed on to the launcher's as it comes, its last ``TAIL_BYTES`` kept."""

    def __init__(self, pipe: IO[bytes], out: IO[bytes]) -> None:
        self._pipe = pipe
        self._out = out
        self._kept = b""
        self._done = threading.Event()
        threading.Thread(target=self._copy, name="trainguard-live-stderr", daemon=True).start()

    def _copy(self) -> None:
        try:
            while chunk := os.read(self._pipe.fileno(), 65536):
                with contextlib.suppress(OSError, ValueError):
                    self._out.write(chunk)
                    self._out.flush()
                self._kept = (self._kept + chunk)[-TAIL_BYTES:]
        finally:
            self._pipe.close()
            self._done.set()

    def text(self, wait: float) -> str:
        """What was kept, once the pipe ended (the worker's last lines read) or after ``wait`` seconds."""
        self._done.wait(wait)
        return self._kept.decode(errors="replace")


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
        self.spares = max(int(environ.get(contract.ENV_LIVE_SPARES) or 0), 0)
        #: Each slot's process: the workers' and the spares' (slots ``nproc`` on at the start).
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        #: The spares waiting: slot -> the launcher's end of the pipe it calls the spare through.
        self.calls: dict[int, int] = {}
        #: The spares last told to the agent: (ready, wanted).
        self._told: tuple[int, int] | None = None
        #: Each local rank's worker's member id, taken as it started.
        self.members: dict[int, str] = {}
        #: The local ranks this launcher started again, and the first starts' stderr.
        self.restarted: set[int] = set()
        self.tails: dict[int, Tail] = {}
        self.finished: set[int] = set()
        self._store: Any = None
        self.keys = contract.LiveKeys(contract.live_prefix(self.run_id))
        self._stopping = False
        self.marks = Path(tempfile.mkdtemp(prefix="trainguard-live-"))

    def command(self) -> list[str]:
        options = self.options
        if options.no_python:
            return [options.training_script, *options.training_script_args]
        module = ["-m"] if options.module else []
        return [sys.executable, "-u", *module, options.training_script, *options.training_script_args]

    def start(self, local_rank: int, spare: bool = False) -> None:
        env = worker_env(
            self.environ, local_rank, self.nproc, self.endpoint, self.run_id, self.size, self.minimum
        )
        env[contract.ENV_LIVE_MARK] = str(self.marks)
        first = local_rank not in self.restarted
        read_end = -1
        if spare:
            read_end, self.calls[local_rank] = os.pipe()
            env[contract.ENV_LIVE_SPARE_FD] = str(read_end)
        try:
            process = subprocess.Popen(
                self.command(),
                env=env,
                stderr=subprocess.PIPE if first else None,
                pass_fds=(read_end,) if spare else (),
            )
        finally:
            if spare:
                os.close(read_end)
        self.workers[local_rank] = process
        self.members[local_rank] = contract.member_id(process.pid, env)
        if first and process.stderr is not None:
            self.tails[local_rank] = Tail(process.stderr, sys.stderr.buffer)

    def gone(self, local_rank: int) -> None:
        """What no round must wait for: this pod's worker of ``local_rank`` ended."""
        member = self.members[local_rank]
        try:
            key = self.keys.gone(member)
            # A set gets no answer (one into a lost connection looks done): the check answers for it.
            self._on_store(lambda store: (store.set(key, "1"), store.check([key])))
        except (RuntimeError, ValueError) as error:  # the others then wait until it is stale
            print(f"trainguard live: could not mark {member} gone: {error}", file=sys.stderr, flush=True)

    def latest_round(self) -> int | None:
        """The job's latest round in the store; None when the store cannot say."""
        key = self.keys.latest()
        try:
            return int(self._on_store(lambda store: store.get(key) if store.check([key]) else b"0"))
        except (RuntimeError, ValueError):
            return None

    def _on_store(self, operation: Callable[[Any], Any]) -> Any:
        """``operation(store)`` on this launcher's client of the job's store; on a new client when the one it
        had fails (the store's server may have come back since)."""
        if self._store is not None:
            try:
                return operation(self._store)
            except RuntimeError:
                self._store = None
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        host, _, port = self.endpoint.rpartition(":")
        store = TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=30))
        result = operation(store)
        self._store = store
        return result

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
        for local_rank in range(self.nproc + self.spares):
            self.start(local_rank, spare=local_rank >= self.nproc)
        while True:
            for local_rank, process in list(self.workers.items()):
                code = process.poll()
                if code is None or local_rank in self.finished:
                    continue
                self.gone(local_rank)
                waiting = self._uncall(local_rank)
                if code == 0:
                    self.finished.add(local_rank)
                    continue
                missing = None if self._stopping else self.judge(local_rank, process.pid)
                if missing is not None:
                    if self.events:
                        workerevents.live_unused(
                            self.events,
                            pid=process.pid,
                            local_rank=local_rank,
                            exit_code=code,
                        )
                    self.end(code)
                    raise NotLive(
                        f"worker {local_rank} (pid {process.pid}) ended with {code} in no round, "
                        f"without {missing}"
                    )
                if self._stopping or self.restarts_left <= 0:
                    return self.end(code)
                self.restarts_left -= 1
                self.restarted.add(local_rank)
                called = None if waiting else self.call_spare(local_rank)
                if self.events:
                    workerevents.append(
                        self.events,
                        workerevents.FAILED,
                        failures=[workerevents.failure(-1, local_rank, process.pid, code)],
                        restarts_left=self.restarts_left,
                        max_restarts=self.max_restarts,
                        **({"spare": True} if called is not None else {}),
                    )
                self.start(local_rank, spare=waiting or called is not None)
            if self.calls and self.finished >= set(self.workers) - set(self.calls):
                self.release_spares()  # every worker is done: the spares leave (exit status 0)
            self.tell_spares()
            if len(self.finished) == len(self.workers):
                return 0
            time.sleep(POLL_SECONDS)

    def call_spare(self, failed: int) -> int | None:
        """Calls a waiting spare in the place of the worker of slot ``failed``: the spare's slot, or None when
        none waits (the failed worker is then started again in its own slot, cold)."""
        for slot in sorted(self.calls):
            if self.workers[slot].poll() is not None:
                continue
            write_end = self.calls.pop(slot)
            try:
                os.write(write_end, f"{failed}\n".encode())
            except OSError:  # it ended meanwhile: the next one
                continue
            finally:
                os.close(write_end)
            print(
                f"trainguard live: spare in slot {slot} (pid {self.workers[slot].pid}) called in place of "
                f"worker {failed}; slot {failed} starts again as a spare",
                file=sys.stderr,
                flush=True,
            )
            return slot
        return None

    def ready_spares(self) -> int:
        """The spares warm and waiting: those whose process marked itself ready (``trainguard.sdk._spare``)."""
        return sum(
            1
            for slot in self.calls
            if (self.marks / f"{self.workers[slot].pid}{contract.SPARE_READY_SUFFIX}").exists()
        )

    def tell_spares(self) -> None:
        """Writes the spares down for the agent when they changed (``workerevents.SPARES``)."""
        if not self.spares or not self.events:
            return
        now = (self.ready_spares(), self.spares)
        if now != self._told:
            self._told = now
            workerevents.append(self.events, workerevents.SPARES, ready=now[0], wanted=now[1])

    def _uncall(self, slot: int) -> bool:
        """Forgets the pipe of an ended process; whether it was a spare still waiting."""
        write_end = self.calls.pop(slot, None)
        if write_end is None:
            return False
        with contextlib.suppress(OSError):
            os.close(write_end)
        return True

    def release_spares(self) -> None:
        for slot in list(self.calls):
            self._uncall(slot)

    def judge(self, local_rank: int, pid: int) -> str | None:
        """The static world's variable a failed worker shows the script lacks (``without_live``), or None."""
        restarted = local_rank in self.restarted
        formed = (self.marks / str(pid)).exists()
        tail = self.tails.get(local_rank)
        plain = restarted or formed or tail is None  # decided without the store and the stderr
        latest = None if plain else self.latest_round()
        stderr = "" if plain or tail is None else tail.text(TAIL_WAIT_SECONDS)
        return without_live(restarted, formed, latest, stderr)

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
            self.gone(local_rank)
        return 128 - code if code < 0 else code


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
