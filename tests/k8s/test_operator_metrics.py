"""The operator's /metrics during a chaos scenario: the counters match the job's history, and a restarted
operator reports the same values (they are recomputed from the resource's status)."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.k8s.cluster import KubeCluster
from tests.k8s.operator_harness import scenario
from tests.k8s.test_operator_cce_job import AITJ, JOB, TRAINERS, _pod, _started

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(300)]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_count_what_the_history_records_and_survive_an_operator_restart(
    kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    with scenario(kube_cluster, tmp_path, namespace="default") as s:
        port = _free_port()
        s.operator.stop()
        s.operator.metrics_port = port
        s.operator.start()
        _started(s)
        s.force_delete(TRAINERS[0])
        job = s.wait_job(
            AITJ,
            JOB,
            "trainer-0 replaced",
            lambda st: st["restartCounts"]["trainer"] == 1 and _pod(st, TRAINERS[0])["phase"] == "Running",
        )
        faults = [h for h in job["status"]["history"] if h["kind"] == "fault"]
        trainer = (
            ("kind", "PodForceDeleted"),
            ("namespace", "default"),
            ("role", "trainer"),
            ("trainingjob", JOB),
        )
        key = ("trainguard_faults_total", trainer)
        running = ("trainguard_jobs", (("phase", "Running"),))
        # The replaced trainer Running comes first; the job's phase back to Running at a later reconcile.
        before = s.wait(
            "the scrape to show the fault and the job Running again",
            lambda: (m := _scrape(port)).get(key) == 1 and m.get(running) == 1 and m,
        )
        assert len(faults) == 1
        assert before["trainguard_controller_reconcile_duration_seconds_count", ()] >= 1

        s.operator.kill()
        s.operator.start()
        after = s.wait("the restarted operator to serve", lambda: _scrape_or_none(port))
        assert after[key] == before[key] == 1
        assert after[running] == 1


def _scrape_or_none(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    try:
        metrics = _scrape(port)
    except OSError:
        return None
    return metrics if metrics.get(("trainguard_jobs", (("phase", "Running"),))) == 1 else None
