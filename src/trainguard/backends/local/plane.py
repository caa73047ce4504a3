"""The control plane's loop: reconcile every job against its processes, on events and on a short tick.

One lock serialises everything that changes pods (the reconcile of one job, a request from the CLI), so the
store's compare-and-swap only ever meets writers from other processes. A pass takes it job by job, so a
request waits for at most one job's reconcile, never for a pass over all of them. Each job's reconcile reads
the stored status, observes, reconciles (``trainguard.controller.reconcile``) and applies; the status is
written last, so a control plane killed at any moment starts again from a status that never claims more than
was done. A job too large for this machine is held (``capacity``): not reconciled until it fits. A job
whose reconcile raises is tried again after its backoff (``trainguard.controller.retries``: one log line a
step, the traceback the first time), or at once when its spec changes or it is deleted.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from pydantic import ValidationError

from trainguard.api import TrainingJob
from trainguard.backends.local import capacity
from trainguard.backends.local.backend import LocalBackend
from trainguard.backends.local.home import Home
from trainguard.backends.local.records import EventRecord, JobRecord, PodState
from trainguard.backends.local.rendezvous import StoreHosts
from trainguard.backends.local.runtime import Runtime
from trainguard.backends.local.statefile import Conflict
from trainguard.backends.local.store import Store
from trainguard.backends.local.waker import Waker
from trainguard.controller import JobStatus, SettledSlots
from trainguard.controller.admission import MACHINE, Hold, PodLimit, admit, count
from trainguard.controller.loop import step
from trainguard.controller.retries import Retries
from trainguard.observability.metrics import ControllerStats

log = logging.getLogger("trainguard.local")

#: Reconcile at least this often (seconds), even when nothing signalled a change.
TICK_SECONDS = 0.25
#: Jobs that ended are looked at less often (cleanup, TTL).
FINISHED_TICK_SECONDS = 2.0


class RequestsFirst:
    """The control plane's lock (re-entrant), fair to requests: one waiting for it (a ``with`` from a CLI
    request) goes in before the loop's next job (``loop_turn``), so a request waits for at most the job being
    reconciled. A flood of requests holds the loop back for ``LOOP_PATIENCE_SECONDS`` at most."""

    LOOP_PATIENCE_SECONDS = 5.0

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(threading.Lock())
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Requests waiting for the lock now."""
        with self._changed:
            return self._waiting

    def __enter__(self) -> RequestsFirst:
        with self._changed:
            self._waiting += 1
        try:
            self._lock.acquire()
        finally:
            with self._changed:
                self._waiting -= 1
                self._changed.notify_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    @contextlib.contextmanager
    def loop_turn(self) -> Iterator[None]:
        """The loop's turn: after the requests waiting now."""
        with self._changed:
            self._changed.wait_for(lambda: self._waiting == 0, timeout=self.LOOP_PATIENCE_SECONDS)
        with self._lock:
            yield


class ControlPlane:
    def __init__(
        self,
        home: Home,
        store: Store,
        clock: Callable[[], float],
        base_env: dict[str, str],
        max_pods: int | None = None,
    ) -> None:
        self.home = home
        #: The most pods of one job this control plane runs (``TRAINGUARD_MAX_PODS``).
        self.max_pods = max_pods if max_pods is not None else capacity.max_pods()
        self.store = store
        self.clock = clock
        self.lock = RequestsFirst()
        #: Slots found settled, skipped by the next reconciles (the controller's memory, owned here).
        self.settled = SettledSlots()
        #: Reconcile now (a request changed something, a child exited).
        self.waker = Waker()
        self.runtime = Runtime(home, store, clock, base_env)
        self.backend = LocalBackend(home, store, self.runtime, clock)
        #: The rendezvous store of each torchrun job, outside its pods.
        self.stores = StoreHosts(home, base_env)
        self._next_look: dict[str, float] = {}
        #: Each job's failures in a row, and when a failed one is tried again (unless its spec changes first).
        self.retries: Retries[str] = Retries()
        self._retry_at: dict[str, tuple[float, tuple[int, bool] | None]] = {}
        #: Reconcile latency, queue depth and errors, for the metrics endpoint.
        self.stats = ControllerStats()
        #: Where the metrics are served (set by the daemon; ``metrics.Endpoint.to_dict()``).
        self.metrics: dict[str, object] = {"url": None, "problem": "metrics are not served"}
        #: Where the job pages are served (set by the daemon; ``trainguard.ui.server.Endpoint.to_dict()``).
        self.ui: dict[str, object] = {"url": None, "problem": "the job pages are not served"}

    def recover(self) -> None:
        """After a start: finish what a killed predecessor left half-done."""
        with self.lock:
            jobs = {}
            for record in self.store.list_jobs():
                job = self.job_model(record)
                if job is not None:
                    jobs[record.name] = (record, job)
            self.runtime.recover(jobs)

    @property
    def limit(self) -> PodLimit:
        """``max_pods``, as the engine decides by it."""
        return PodLimit(self.max_pods, MACHINE)

    @staticmethod
    def job_model(record: JobRecord) -> TrainingJob | None:
        try:
            return TrainingJob.model_validate(record.spec)
        except ValidationError:
            log.exception("job %s: stored spec no longer validates; leaving it alone", record.name)
            return None

    # ---- the loop ----------------------------------------------------------------------------------

    def run(self, stop: threading.Event, idle_exit_seconds: float | None) -> None:
        idle_since: float | None = None
        while not stop.is_set():
            busy = self.step()
            now = self.clock()
            idle_since = None if busy else (idle_since if idle_since is not None else now)
            if (
                idle_exit_seconds is not None
                and idle_since is not None
                and now - idle_since >= idle_exit_seconds
            ):
                log.info("nothing to do for %.0f s; exiting", now - idle_since)
                return
            self.waker.wait(TICK_SECONDS)

    def step(self) -> bool:
        """One pass over every job; True while any job is unfinished or any pod process remains.

        The lock is taken for one job at a time, and each job is read again under it: a request in between
        (a delete, a scale) is seen by the job's own reconcile, and waits for no other job's."""
        busy = False
        names = self.store.job_names(include_deleted=True)
        now = self.clock()
        self.stats.set_queue_depth(
            sum(1 for name in names if max(self._next_look.get(name, 0.0), self._retry_time(name)) <= now)
        )
        for name in names:
            if self._backing_off(name, None):
                busy = True
                continue
            started = time.monotonic()
            due = False
            seen: tuple[int, bool] | None = None
            try:
                with self.lock.loop_turn():
                    record = self.store.get_job(name, include_deleted=True)
                    if record is None:  # forgotten meanwhile
                        self._forget(name)
                        continue
                    seen = (record.spec_version, record.deleted)
                    if self._backing_off(name, seen):
                        busy = True
                        continue
                    due = record.deleted or self._next_look.get(name, 0.0) <= self.clock()
                    busy |= self._step_job(record)
                self.retries.succeeded(name)
                self._retry_at.pop(name, None)
            except Exception as error:  # one broken job must not stop the others
                self._failed(name, error, seen)
                busy = True
            if due:
                self.stats.observe(time.monotonic() - started)
        return busy

    def _failed(self, name: str, error: Exception, seen: tuple[int, bool] | None) -> None:
        """A job whose reconcile raised: try it again after its backoff, with one log line a step."""
        self.stats.failed()
        retry = self.retries.failed(name)
        retry.log(log, f"reconcile of job {name}", error)
        self._retry_at[name] = (self.clock() + retry.delay, seen)

    def _backing_off(self, name: str, seen: tuple[int, bool] | None) -> bool:
        """Whether the job failed lately and waits for its backoff. ``seen``: its spec version and whether it
        is deleted, as read now (None: not read yet). A change of either ends the wait, as an edit reaches the
        operator through its watch; a job that failed before it could be read waits without being read."""
        waiting = self._retry_at.get(name)
        if waiting is None or waiting[0] <= self.clock():
            return False
        failed_with = waiting[1]
        return failed_with is None or failed_with == seen

    def _retry_time(self, name: str) -> float:
        waiting = self._retry_at.get(name)
        return waiting[0] if waiting is not None else 0.0

    def _forget(self, name: str) -> None:
        self._next_look.pop(name, None)
        self._retry_at.pop(name, None)
        self.retries.succeeded(name)

    def _step_job(self, record: JobRecord) -> bool:
        if record.deleted:
            return self._finish_delete(record)
        now = self.clock()
        if self._next_look.get(record.name, 0.0) > now:
            return True
        job = self.job_model(record)
        if job is None:
            return False
        admitted = self._admit(record, job)
        if admitted is None:
            return True  # held: waits until it fits, and keeps the control plane up meanwhile
        record, status = admitted
        if not status.phase.is_terminal and self.stores.needed(job, record.port):
            self.stores.ensure(job, record.uid, record.port)  # before any pod's agent looks for it
        self.runtime.place_pending(record, job)
        self.runtime.refresh(record.name, keep=True)  # the kubelet's part, before the controller looks
        result = step(self.backend, job, status, now, self.settled)
        if result.applied.conflict:  # written meanwhile: read the stored status again, decide again at once
            self._next_look[record.name] = 0.0
            self.waker.wake()
            return True
        ttl, completed = job.spec.ttl_seconds_after_finished, result.status.completed_at
        if (
            result.status.phase.is_terminal
            and ttl is not None
            and completed is not None
            and now >= completed + ttl
        ):
            log.info("job %s: ttlSecondsAfterFinished (%d s) has passed; deleting it", record.name, ttl)
            self.delete(record)
            return True
        alive = self.store.has_alive_pods(record.name)
        finished = result.status.phase.is_terminal
        if finished and not alive:
            self.stores.stop(record.name, record.uid)
            self._free_memory(record)
        # A live job is reconciled on every pass (a pass is at most TICK_SECONDS, sooner on any change, so
        # result.wake_at is always met); an ended one without processes only now and then.
        self._next_look[record.name] = now + FINISHED_TICK_SECONDS if finished and not alive else 0.0
        return alive or not finished

    def _admit(self, record: JobRecord, job: TrainingJob) -> tuple[JobRecord, JobStatus] | None:
        """The engine's admission, carried out: None while the job is too large to run here (its status says
        why, an event says so once per size); else the record and status to reconcile (a job that was held
        gets its nodes now, and starts from an empty status)."""
        status = self.backend.read_status(record)
        admission = admit(job, status, self.limit, capacity.explain, self.clock())
        if isinstance(admission, Hold):
            if admission.status is not None:
                try:
                    self.store.update_status(
                        record.name, capacity.held_status(admission.status), record.status_version
                    )
                except Conflict:  # written meanwhile: the next pass decides again
                    return None
            event = admission.event
            if event is not None:
                said = EventRecord(
                    record.name, event.at, event.type.value, event.reason, record.name, event.message
                )
                self.store.append_event_once(event.key, said)
                log.info("job %s held: %s", record.name, event.message)
            return None
        if admission.fresh:  # it fits now: its nodes, and a status the controller starts from
            capacity.ensure_nodes(self.store, job, record.nodes_wanted, self.max_pods)
            version = self.store.update_status(record.name, {}, record.status_version)
            pods = count(job, MACHINE)
            log.info("job %s fits now (%d pods); starting it", record.name, pods)
            record = replace(record, status={}, status_version=version)
            status = self.backend.read_status(record)
        return record, status

    # ---- deleting ----------------------------------------------------------------------------------

    def delete(self, record: JobRecord) -> None:
        """Mark the job deleted and stop its pods; the loop forgets it once they are gone."""
        with self.lock:
            self.store.mark_job_deleted(record.name)
            self._finish_delete(record)
        self.waker.wake()

    def _finish_delete(self, record: JobRecord) -> bool:
        rows = self.runtime.refresh(record.name)
        job = self.job_model(record)
        for row in rows:  # again after a restart: the control plane may have died before stopping them all
            overdue = row.stop_deadline is not None and self.clock() >= row.stop_deadline
            if row.alive and (row.state is not PodState.TERMINATING or overdue):
                if job is None:
                    self.runtime.kill_now(row)
                else:  # a deleted job's pods: its own removal (the garbage collector's part), no decision
                    self.runtime.terminate(job, row.name, row.launch, force=overdue)
        if any(row.alive for row in rows):
            return True
        self.stores.stop(record.name, record.uid)
        self._free_memory(record)
        # Files first: once the job is gone from the store, a command may look and find nothing left.
        shutil.rmtree(self.home.job_dir(record.name), ignore_errors=True)
        shutil.rmtree(self.home.logs_dir / record.name, ignore_errors=True)
        self.store.forget_job(record.name)
        self._forget(record.name)
        log.info("job %s deleted", record.name)
        return False

    def _free_memory(self, record: JobRecord) -> None:
        """The job's memory snapshots, on every node: once it has ended (or is deleted), nothing resumes."""
        if record.uid:
            shutil.rmtree(self.home.snapshots_root / record.uid, ignore_errors=True)
            with contextlib.suppress(OSError):  # the last job's: leave nothing in /dev/shm
                self.home.snapshots_root.rmdir()

    def stop_all_pods(self) -> None:
        """SIGKILL every pod of every job (the control plane is told to shut down with its pods)."""
        with self.lock:
            for row in self.store.list_pods():
                if row.alive:
                    self.runtime.kill_now(row)
            for record in self.store.list_jobs(include_deleted=True):
                self.stores.stop(record.name, record.uid)
                self._free_memory(record)  # its pods are gone: nothing will resume from it
