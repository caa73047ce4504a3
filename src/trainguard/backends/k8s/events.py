"""Events as the operator writes them (``kubectl get events`` and ``describe`` show them)."""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.status import rfc3339
from trainguard.controller.backend import EmitEvent

Obj = dict[str, Any]
COMPONENT = "trainguard-operator"
#: Events waiting for the sender at most; past that a new one is dropped (and logged), as client-go's recorder
#: drops what its full queue cannot take: an API server that refuses Events never grows the operator's memory.
PENDING_MAX = 10_000
#: How long an Event may wait for the operator's other requests (its pods, their statuses) to be done before it
#: is sent anyway: in a burst (a submit of many jobs) the pods go first and their Events trail them.
YIELD_S = 5.0
log = logging.getLogger(__name__)


def event_body(kind: JobKind, namespace: str, name: str, uid: str, action: EmitEvent, identity: str) -> Obj:
    """The Event object of ``action``: named after its key (so it is created once), about the job or a pod."""
    digest = hashlib.sha256(action.key.encode()).hexdigest()[:16]
    when = rfc3339(action.at)
    involved: Obj = {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "name": name,
        "namespace": namespace,
        "uid": uid,
    }
    if action.pod is not None:
        involved = {"apiVersion": "v1", "kind": "Pod", "name": action.pod, "namespace": namespace}
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{digest}", "namespace": namespace},
        "involvedObject": involved,
        "type": action.type.value,
        "reason": action.reason,
        "message": action.message[:1024],
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": identity,
    }
    return body


def post_event(kube: Kube, body: Obj) -> None:
    """Create the Event; one of the same name exists already (its key was said before): done."""
    namespace = body["metadata"]["namespace"]
    try:
        kube.create(f"/api/v1/namespaces/{namespace}/events", body)
    except ApiError as error:
        if error.status != 409:
            raise


class EventSender:
    """The operator's Events, sent by one thread of their own one after another, as a Go controller's event
    recorder sends them: a reconcile hands its Events over and goes on, so that they never stand between a job's
    decisions and its pods, nor take more than one of the operator's requests in flight. Each Event also lets
    the operator's other requests go first, for at most ``yield_s`` from when it was handed over: at the API
    server, a burst's pods are not slowed by the Events that tell of them. A refused Event is handed to its
    ``failed`` callback (the job's error log)."""

    def __init__(
        self,
        kube: Kube,
        pending_max: int = PENDING_MAX,
        yield_s: float = YIELD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.yield_s = yield_s
        self.clock = clock
        self._queue: queue.Queue[tuple[Obj, Callable[[ApiError], None], float] | None] = queue.Queue(
            pending_max
        )
        self._idle = threading.Condition()
        self._unsent = 0
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def send(self, body: Obj, failed: Callable[[ApiError], None]) -> None:
        with self._idle:
            self._unsent += 1
        try:
            self._queue.put_nowait((body, failed, self.clock()))
        except queue.Full:
            self._sent()
            log.warning(
                "%d Events wait to be sent: dropping %s %s (%s)",
                self._queue.maxsize,
                body["involvedObject"]["name"],
                body["reason"],
                body["message"][:200],
            )

    def flush(self, timeout: float) -> bool:
        """Wait until every Event handed over so far has been sent (or refused); False after ``timeout``."""
        with self._idle:
            return self._idle.wait_for(lambda: self._unsent == 0, timeout)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _sent(self) -> None:
        with self._idle:
            self._unsent -= 1
            if self._unsent == 0:
                self._idle.notify_all()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            body, failed, handed = item
            try:
                self.kube.activity.wait_quiet(handed + self.yield_s - self.clock())
                post_event(self.kube, body)
            except ApiError as error:
                failed(error)
            except Exception:  # a bug in a callback: the sender goes on with the next Event
                log.exception("sending the Event %s failed", body["metadata"]["name"])
            finally:
                self._sent()
