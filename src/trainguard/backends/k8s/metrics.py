"""The operator's Prometheus endpoint: the same metrics as the local control plane's, from the job resources.

A scrape reads the operator's watch cache of every job resource and recomputes the job metrics from their
``status`` (``trainguard.observability.prometheus``), so restarting the operator, or a new leader taking over,
neither resets nor doubles a counter. Every replica serves it (a follower reports the same jobs and its own
idle reconcile loop). In the cluster it listens on all interfaces of the pod (``--metrics-port``, 8080 in the
Deployment) for Prometheus to scrape; run by hand it defaults to loopback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.process_collector import ProcessCollector

from trainguard.backends.k8s.status import read_status
from trainguard.observability.metrics import JobSnapshot
from trainguard.observability.prometheus import JobsCollector

log = logging.getLogger("trainguard.k8s")

Obj = dict[str, object]


def snapshots(objects: Callable[[], Iterable[dict[str, object]]]) -> Callable[[], list[JobSnapshot]]:
    """Job snapshots from the cached job resources (roles as the status records them)."""

    def take() -> list[JobSnapshot]:
        taken = []
        for obj in objects():
            meta = obj.get("metadata")
            if not isinstance(meta, dict) or not obj.get("status"):
                continue  # not reconciled yet: nothing to count
            try:
                status = read_status(obj)
            except ValueError:
                continue  # a status someone else wrote by hand: not ours to count
            taken.append(
                JobSnapshot(
                    namespace=str(meta.get("namespace") or "default"),
                    name=str(meta.get("name")),
                    roles=tuple(status.desired),
                    status=status,
                )
            )
        return taken

    return take


def serve(port: int, address: str, collector: JobsCollector) -> str:
    """Start serving in a thread; returns the URL."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    server, _ = start_http_server(port, addr=address, registry=registry)
    host = f"[{address}]" if ":" in address else address
    url = f"http://{host}:{server.server_port}/metrics"
    log.info("metrics at %s", url)
    return url
