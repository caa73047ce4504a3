"""The local control plane's Prometheus endpoint: ``http://127.0.0.1:<port>/metrics``.

It listens on the loopback interface only, on an ephemeral port unless ``TRAINGUARD_METRICS_PORT`` names
one (``off`` serves nothing); ``TRAINGUARD_METRICS_ADDRESS`` binds elsewhere for whoever wants that.
``trainguard metrics --url`` asks the control plane where it listens. A scrape reads every job's stored
status at that moment (``trainguard.observability.metrics``), so counters survive control-plane restarts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.process_collector import ProcessCollector

from trainguard.backends.local.records import JobRecord
from trainguard.backends.local.store import Store
from trainguard.controller.status import JobStatus
from trainguard.observability.metrics import ControllerStats, JobSnapshot
from trainguard.observability.prometheus import JobsCollector

log = logging.getLogger("trainguard.local")

ENV_PORT = "TRAINGUARD_METRICS_PORT"
ENV_ADDRESS = "TRAINGUARD_METRICS_ADDRESS"
DEFAULT_ADDRESS = "127.0.0.1"


@dataclass(frozen=True)
class Endpoint:
    """Where the metrics are served, or why they are not (``url`` None, ``problem`` says why)."""

    url: str | None
    problem: str = ""
    close: Callable[[], None] = lambda: None

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "problem": self.problem}


def store_collector(store: Store, stats: ControllerStats) -> JobsCollector:
    """Reads the store at every scrape: the jobs' metrics from their status, and the loop's own figures."""
    return JobsCollector(lambda: [snapshot(record) for record in store.list_jobs()], stats)


def snapshot(record: JobRecord) -> JobSnapshot:
    metadata = record.spec.get("metadata", {})
    roles = tuple(record.spec.get("spec", {}).get("replicaSpecs", {}))
    return JobSnapshot(
        namespace=str(metadata.get("namespace") or "default"),
        name=record.name,
        roles=roles,
        status=JobStatus.from_dict(record.status),
    )


def serve(store: Store, stats: ControllerStats, environ: dict[str, str] | None = None) -> Endpoint:
    """Start the endpoint in a thread of this process; a port that cannot be had is logged, not fatal."""
    env = os.environ if environ is None else environ
    wanted = env.get(ENV_PORT, "").strip()
    if wanted.lower() == "off":
        return Endpoint(None, f"metrics are off ({ENV_PORT}=off)")
    try:
        port = int(wanted) if wanted else 0
        if not 0 <= port <= 65535:
            raise ValueError
    except ValueError:
        return Endpoint(None, f"{ENV_PORT}={wanted!r} is not a port number (0-65535, or off)")
    address = env.get(ENV_ADDRESS, "").strip() or DEFAULT_ADDRESS
    registry = CollectorRegistry(auto_describe=False)
    registry.register(store_collector(store, stats))
    ProcessCollector(registry=registry)
    try:
        server, _ = start_http_server(port, addr=address, registry=registry)
    except OSError as error:
        problem = f"cannot serve metrics on {address}:{port}: {error.strerror or error}"
        log.error("%s; set %s to a free port", problem, ENV_PORT)
        return Endpoint(None, problem)
    host = f"[{address}]" if ":" in address else address
    url = f"http://{host}:{server.server_port}/metrics"
    log.info("metrics at %s", url)

    def close() -> None:
        server.shutdown()
        server.server_close()

    return Endpoint(url, close=close)
