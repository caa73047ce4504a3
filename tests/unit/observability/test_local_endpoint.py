"""The local control plane's endpoint: Prometheus text read from the store at scrape time, on loopback."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.controller.harness import Harness
from tests.unit.observability.scenario import JOB, bad_night
from trainguard.backends.local.metrics import ENV_PORT, serve, store_collector
from trainguard.backends.local.records import JobRecord
from trainguard.backends.local.store import Store
from trainguard.observability.metrics import ControllerStats


@pytest.fixture(scope="module")
def night() -> Harness:
    return bad_night()


@pytest.fixture
def store(tmp_path: Path, night: Harness) -> Iterator[Store]:
    opened = Store(tmp_path / "state.db")
    opened.insert_job(
        JobRecord(
            name=JOB,
            uid="uid-1",
            spec=night.job.to_dict(),
            spec_version=1,
            status=night.status.to_dict(),
            status_version=1,
            created_at=0.0,
            port=1,
        )
    )
    yield opened
    opened.close()


def scrape_text(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def labels(**pairs: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(pairs.items()))


def test_a_scrape_reads_the_stored_status_in_prometheus_text(store: Store) -> None:
    stats = ControllerStats()
    stats.observe(0.002)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(store_collector(store, stats))
    text = generate_latest(registry).decode()
    samples = scrape_text(text)
    trainer = {"namespace": "default", "trainingjob": JOB, "role": "trainer"}
    assert samples[("trainguard_faults_total", labels(**trainer, kind="Hang"))] == 1
    assert samples[("trainguard_hang_detections_total", labels(**trainer))] == 1
    assert samples[("trainguard_jobs", labels(phase="Running"))] == 1
    assert samples[("trainguard_controller_reconcile_duration_seconds_count", ())] == 1
    assert samples[("trainguard_controller_reconcile_duration_seconds_bucket", labels(le="0.0025"))] == 1
    recovery = [k for k, v in samples.items() if k[0] == "trainguard_fault_recovery_seconds_count" and v]
    assert len(recovery) == 3
    assert "# TYPE trainguard_faults_total counter" in text
    assert "# TYPE trainguard_fault_recovery_seconds histogram" in text
    # A second scrape of the same store says the same (nothing is counted by scraping).
    assert scrape_text(generate_latest(registry).decode()) == samples


def test_served_on_loopback_at_an_ephemeral_port(store: Store) -> None:
    endpoint = serve(store, ControllerStats(), {})
    try:
        assert endpoint.url is not None
        assert endpoint.url.startswith("http://127.0.0.1:")
        assert endpoint.url.endswith("/metrics")
        with urllib.request.urlopen(endpoint.url, timeout=10) as answer:
            text = answer.read().decode()
        assert "trainguard_faults_total" in text
        assert "process_cpu_seconds_total" in text
    finally:
        endpoint.close()


def test_a_port_that_is_taken_is_a_problem_not_a_crash(store: Store) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        endpoint = serve(store, ControllerStats(), {ENV_PORT: str(port)})
    assert endpoint.url is None
    assert f"127.0.0.1:{port}" in endpoint.problem


@pytest.mark.parametrize(
    ("value", "problem"),
    [("off", "metrics are off"), ("http", "is not a port number"), ("70000", "is not a port number")],
)
def test_metrics_port_setting(store: Store, value: str, problem: str) -> None:
    endpoint = serve(store, ControllerStats(), {ENV_PORT: value})
    assert endpoint.url is None
    assert problem in endpoint.problem
    assert endpoint.to_dict() == {"url": None, "problem": endpoint.problem}
