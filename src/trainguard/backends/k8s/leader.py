"""Leader election on a ``coordination.k8s.io/v1`` Lease, so that of several operator replicas one acts.

The holder renews the Lease every ``renew_seconds``; another replica takes it over only once it has not been
renewed for ``lease_seconds``. Every write carries the Lease's resourceVersion, so two replicas racing for
it cannot both win. A leader that fails to renew stops acting *before* its lease could have expired
(``is_leader`` turns False after ``lease_seconds - renew_seconds`` without a renewal), and the writes it
makes carry versions too, so even a paused leader's late write is refused.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from trainguard.backends.k8s.client import ApiError, Kube

log = logging.getLogger(__name__)


def _micro_time(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: Any) -> float:
    if not isinstance(value, str):
        return 0.0
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class LeaderElection:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: float = 15,
        renew_seconds: float = 2,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.clock = clock
        self.monotonic = monotonic
        self._renewed_at: float | None = None
        self._stop = threading.Event()
        self.changed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader election", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if release and self.is_leader():
            self._release()

    def is_leader(self) -> bool:
        renewed = self._renewed_at
        return renewed is not None and self.monotonic() - renewed < self.lease_seconds - self.renew_seconds

    def _run(self) -> None:
        while not self._stop.is_set():
            was = self.is_leader()
            try:
                self.try_acquire_or_renew()
            except ApiError as error:
                log.warning("lease %s/%s: %s", self.namespace, self.name, error)
            except Exception as error:  # the API server is away: keep trying, leadership lapses by itself
                log.warning("lease %s/%s: %s", self.namespace, self.name, error)
            if self.is_leader() != was:
                log.info("%s %s leadership", self.identity, "took" if self.is_leader() else "lost")
                self.changed.set()
            self._stop.wait(self.renew_seconds)

    def try_acquire_or_renew(self) -> bool:
        started = self.monotonic()
        now = self.clock()
        try:
            lease = self.kube.get(f"{self.path}/{self.name}")
        except ApiError as error:
            if error.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, now, 0),
            }
            return self._write("POST", self.path, body, started)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = _parse(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            lease["spec"] = self._spec(_parse(spec.get("acquireTime")) or now, now, transitions)
        elif not holder or now - renewed > duration:
            lease["spec"] = self._spec(now, now, transitions + 1)
        else:
            self._renewed_at = None
            return False
        return self._write("PUT", f"{self.path}/{self.name}", lease, started)

    def _spec(self, acquired: float, renewed: float, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_seconds),
            "acquireTime": _micro_time(acquired),
            "renewTime": _micro_time(renewed),
            "leaseTransitions": transitions,
        }

    def _write(self, method: str, path: str, body: dict[str, Any], started: float) -> bool:
        try:
            self.kube.request(method, path, body)
        except ApiError as error:
            if error.status in (409, 422):  # another replica wrote first
                self._renewed_at = None
                return False
            raise
        self._renewed_at = started  # counted from before the write: never longer than the lease
        return True

    def _release(self) -> None:
        """Hand the lease over at once on a clean stop, so that a successor need not wait it out."""
        try:
            lease = self.kube.get(f"{self.path}/{self.name}")
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["renewTime"] = _micro_time(0)
                self.kube.replace(f"{self.path}/{self.name}", lease)
        except ApiError as error:
            log.warning("releasing lease %s/%s: %s", self.namespace, self.name, error)
