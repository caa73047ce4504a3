"""Events as the operator writes them (``kubectl get events`` and ``describe`` show them), and the sender that
writes them off the reconciles."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.status import rfc3339
from trainguard.controller.backend import EmitEvent

Obj = dict[str, Any]
COMPONENT = "trainguard-operator"
#: Events one operator has in flight at once (beside the apply pool's requests).
EVENT_SENDERS = 4
log = logging.getLogger(__name__)


class EventSender:
    """Writes Events beside the reconciles, as client-go's event recorder does for Kubernetes' own controllers
    (Kubeflow's operator among them): a reconcile hands an Event over and goes on, so that its pods and its
    status never wait behind what only people read. An Event named after its key is created once (409: sent
    before); one the API server refuses is reported to ``failed``, for the controller to see. An operator that
    stops or crashes with Events still queued loses them, as client-go's recorder does."""

    def __init__(self, kube: Kube, senders: int = EVENT_SENDERS) -> None:
        self.kube = kube
        self._pool = ThreadPoolExecutor(senders, thread_name_prefix="events")
        self._lock = threading.Lock()
        self._pending: set[Future[None]] = set()

    def send(self, namespace: str, body: Obj, failed: Callable[[ApiError], None]) -> None:
        future = self._pool.submit(self._create, namespace, body, failed)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._done)

    def _create(self, namespace: str, body: Obj, failed: Callable[[ApiError], None]) -> None:
        try:
            self.kube.create(f"/api/v1/namespaces/{namespace}/events", body)
        except ApiError as error:
            if error.status != 409:  # the same key: sent before
                failed(error)
        except Exception as error:  # the API server out of reach: said, and the reconciles go on
            log.warning("%s: event %s not sent: %s", namespace, body["metadata"]["name"], error)

    def _done(self, future: Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)

    def flush(self, timeout: float) -> bool:
        """Wait until every Event handed over so far is sent (or refused); False if ``timeout`` passed first."""
        with self._lock:
            pending = set(self._pending)
        return not wait(pending, timeout=timeout).not_done

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


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
