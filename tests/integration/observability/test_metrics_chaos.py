"""The local control plane's /metrics, scraped while chaos hits a real job: after every step the counters
say exactly what the job's history says, and a control plane killed with SIGKILL comes back with the same
counters (neither reset nor doubled)."""

from __future__ import annotations

import time
import urllib.request
from collections import Counter
from typing import Any

import pytest
from local.harness import LocalRuntime
from local.jobs import TICKING, cce_job, with_spec
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
#: The counters whose every series must be explained by the history.
COUNTERS = (
    "trainguard_faults_total",
    "trainguard_restarts_total",
    "trainguard_hang_detections_total",
    "trainguard_hang_restarts_total",
    "trainguard_scale_events_total",
    "trainguard_fault_recovery_seconds_count",
    "trainguard_fault_recovery_seconds_sum",
    "trainguard_job_time_lost_seconds_total",
)
#: How many reconcile passes this control plane has made.
RECONCILES = ("trainguard_controller_reconcile_duration_seconds_count", ())


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def settled_scrape(
    local: LocalRuntime, job: str, url: str, timeout: float = 20
) -> tuple[Samples, dict[str, Any]]:
    """A scrape and a view of the job taken with no change in between (two equal scrapes around the view),
    once the control plane has reconciled (one just started may serve /metrics before its first pass)."""
    deadline = time.monotonic() + timeout
    while True:
        before = scrape(url)
        view = local.view(job)
        reconciled = before.get(RECONCILES, 0) > 0
        if reconciled and _counters(scrape(url)) == _counters(before):
            return before, view
        if time.monotonic() > deadline:
            raise AssertionError("the counters kept changing" if reconciled else "no reconcile pass yet")
        time.sleep(0.1)


def _counters(samples: Samples) -> Samples:
    """The counters that are not 0 (every series of a job exists from the start, at 0)."""
    return {key: value for key, value in samples.items() if key[0] in COUNTERS and value}


def expected_from_history(view: dict[str, Any]) -> Samples:
    """The counters as a reader of ``status.history`` would count them, independently of the exporter."""
    job = {"namespace": "default", "trainingjob": view["metadata"]["name"]}
    role_of = {pod["name"]: pod["role"] for pod in view["status"]["pods"]}
    counts: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()

    def add(name: str, value: float = 1, **labels: str) -> None:
        counts[(name, tuple(sorted({**job, **labels}.items())))] += value

    for entry in view["status"]["history"]:
        if entry["kind"] == "scale":
            add("trainguard_scale_events_total", role="trainer", operation=entry["action"], cause="request")
            continue
        role, kind = role_of[entry["pod"]], entry["fault"]
        add("trainguard_faults_total", role=role, kind=kind)
        if kind == "Hang":
            add("trainguard_hang_detections_total", role=role)
        if entry["action"] == "restart-in-place":  # a hang restart, not a restart
            add("trainguard_hang_restarts_total", role=role)
        elif entry["action"] == "restart":
            counted = "true" if entry["counted"] else "false"
            add(
                "trainguard_restarts_total",
                role=role,
                action=entry["action"],
                scope=entry["scope"],
                counted=counted,
            )
        if entry["recoverySeconds"] is not None:
            add("trainguard_fault_recovery_seconds_count", role=role, kind=kind)
            add("trainguard_fault_recovery_seconds_sum", entry["recoverySeconds"], role=role, kind=kind)
            add("trainguard_job_time_lost_seconds_total", entry["recoverySeconds"], cause=kind)
    return dict(counts)


def check(local: LocalRuntime, job: str, url: str) -> Samples:
    samples, view = settled_scrape(local, job, url)
    assert _counters(samples) == pytest.approx(expected_from_history(view))
    pods = Counter((pod["role"], pod["phase"]) for pod in view["status"]["pods"])
    for role, count in view["status"]["hangRestartCounts"].items():  # what the hang restarts are read from
        labels = {"namespace": "default", "trainingjob": job, "role": role}
        assert samples[("trainguard_hang_restarts_total", tuple(sorted(labels.items())))] == count
    for (role, phase), count in pods.items():
        labels = {"namespace": "default", "trainingjob": job, "role": role, "phase": phase}
        assert samples[("trainguard_pods", tuple(sorted(labels.items())))] == count
    assert samples[("trainguard_jobs", (("phase", view["status"]["phase"]),))] == 1
    return samples


def recovered(view: dict[str, Any], fault: str) -> bool:
    entries = [e for e in view["status"]["history"] if e.get("fault") == fault]
    return bool(entries) and all(e["recoverySeconds"] is not None for e in entries)


def test_counters_match_the_history_through_chaos_and_a_control_plane_crash(local: LocalRuntime) -> None:
    spec = with_spec(cce_job("chaos", launcher=TICKING, trainer=TICKING), hang={"timeoutSeconds": 1.5})
    job = local.submit(spec)
    local.wait_running(job, 4)
    result = local.cli("metrics", "--url")
    assert result.code == 0, result.err
    url = result.out.strip()
    assert url.startswith("http://127.0.0.1:")
    assert url.endswith("/metrics")
    check(local, job, url)

    assert local.cli("chaos", "kill", "chaos-trainer-0").code == 0
    local.wait(job, lambda v: recovered(v, "Exited"), what="the kill recovered from")
    check(local, job, url)

    assert local.cli("chaos", "force-delete", "chaos-trainer-1").code == 0
    local.wait(job, lambda v: recovered(v, "PodForceDeleted"), what="the force-delete recovered from")
    check(local, job, url)

    scaled = local.cli("scale", job, "--role", "trainer", "--replicas", "5", "--wait", "--timeout", "60")
    assert scaled.code == 0, scaled.err
    assert scaled.out.splitlines()[-1] == "job chaos: role trainer has 5 pods running"
    before_crash = check(local, job, url)

    local.kill_control_plane()
    result = local.cli("metrics", "--url")  # starts a new control plane, on a new ephemeral port
    assert result.code == 0, result.err
    url = result.out.strip()
    after_crash = check(local, job, url)
    assert _counters(after_crash) == _counters(before_crash)

    assert local.cli("chaos", "hang", "chaos-trainer-2").code == 0
    local.wait(job, lambda v: recovered(v, "Hang"), timeout=30, what="the hang recovered from")
    assert local.cli("scale", job, "--role", "trainer", "--replicas", "2", "--wait").code == 0
    final = check(local, job, url)

    totals = Counter()
    for (name, labels), value in _counters(final).items():
        if name == "trainguard_faults_total":
            totals[dict(labels)["kind"]] += value
    assert totals == {"Exited": 1, "PodForceDeleted": 1, "Hang": 1}
    # The hang was restarted in place: one hang restart, and the restarts are the two relaunches alone.
    by_name = Counter()
    for (name, labels), value in _counters(final).items():
        by_name[(name, dict(labels).get("action"))] += value
    assert by_name[("trainguard_hang_restarts_total", None)] == 1
    assert by_name[("trainguard_restarts_total", "restart")] == 2
    assert by_name[("trainguard_restarts_total", "restart-in-place")] == 0
    scale_ops = {
        dict(labels)["operation"]: value
        for (name, labels), value in _counters(final).items()
        if name == "trainguard_scale_events_total"
    }
    assert scale_ops == {"scaleout": 1, "scalein": 1}
