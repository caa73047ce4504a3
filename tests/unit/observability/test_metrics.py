"""Job metrics are a function of the stored status: they match the history, survive a restart of the
controller (a status read back), and counters never go down while the controller runs."""

from __future__ import annotations

import pytest

from tests.unit.controller.harness import Harness, cce_spec, make_job
from tests.unit.observability.scenario import JOB, bad_night, pod
from trainguard.controller import HistoryEntry, JobStatus, LiveRound
from trainguard.observability.metrics import (
    CONTROLLER_METRICS,
    JOB_METRICS,
    RECOVERY_BUCKETS,
    ControllerStats,
    Family,
    JobSnapshot,
    MetricType,
    entry_role,
    histogram,
    job_families,
)

ROLES = ("launcher", "trainer")
KEY = ("default", JOB)


def snapshot(status: JobStatus, name: str = JOB) -> JobSnapshot:
    return JobSnapshot("default", name, ROLES, status)


def values(families: list[Family], name: str) -> dict[tuple[str, ...], float]:
    family = next(f for f in families if f.spec.name == name)
    return {sample.labels: sample.value for sample in family.samples}


def nonzero(families: list[Family], name: str) -> dict[tuple[str, ...], float]:
    return {labels: value for labels, value in values(families, name).items() if value}


@pytest.fixture(scope="module")
def night() -> Harness:
    return bad_night()


def test_the_bad_night_counts_each_fault_restart_hang_and_scaling_step(night: Harness) -> None:
    families = job_families([snapshot(night.status)])
    assert nonzero(families, "trainguard_faults_total") == {
        (*KEY, "trainer", "Exited"): 1,
        (*KEY, "trainer", "Hang"): 1,
        (*KEY, "trainer", "PodForceDeleted"): 1,
    }
    # The hang was restarted in place: a hang restart, not a restart.
    assert nonzero(families, "trainguard_restarts_total") == {(*KEY, "trainer", "restart", "Pod", "true"): 2}
    assert nonzero(families, "trainguard_hang_detections_total") == {(*KEY, "trainer"): 1}
    assert nonzero(families, "trainguard_hang_restarts_total") == {(*KEY, "trainer"): 1}
    assert night.status.hang_restart_counts == {"launcher": 0, "trainer": 1}
    assert nonzero(families, "trainguard_scale_events_total") == {
        (*KEY, "trainer", "scaleout", "request"): 1,
        (*KEY, "trainer", "scalein", "request"): 1,
    }
    assert nonzero(families, "trainguard_jobs") == {("Running",): 1}
    assert values(families, "trainguard_job_status_phase")[(*KEY, "Running")] == 1
    assert nonzero(families, "trainguard_pods") == {
        (*KEY, "launcher", "Running"): 1,
        (*KEY, "trainer", "Running"): 2,
        (*KEY, "trainer", "Removed"): 3,
    }
    assert values(families, "trainguard_job_faults_recovering") == {KEY: 0}


def test_recovery_histogram_and_time_lost_are_the_recovery_seconds_of_the_history(night: Harness) -> None:
    families = job_families([snapshot(night.status)])
    faults = [e for e in night.status.history if e.kind == "fault"]
    assert all(e.recovery_seconds is not None for e in faults)
    (recovery,) = [f for f in families if f.spec.name == "trainguard_fault_recovery_seconds"]
    by_kind = {sample.labels[3]: sample for sample in recovery.histograms if sample.count}
    assert set(by_kind) == {"Exited", "Hang", "PodForceDeleted"}
    for entry in faults:
        sample = by_kind[str(entry.fault)]
        assert sample.count == 1
        assert sample.sum == entry.recovery_seconds
        assert sample.counts == tuple(int(entry.recovery_seconds <= b) for b in RECOVERY_BUCKETS)
    lost = nonzero(families, "trainguard_job_time_lost_seconds_total")
    assert lost == {(*KEY, str(e.fault)): e.recovery_seconds for e in faults}


def test_metrics_of_a_status_read_back_are_the_same(night: Harness) -> None:
    """What a restarted controller (or a second scrape) reports: neither reset nor doubled."""
    again = JobStatus.from_dict(night.status.to_dict())
    assert job_families([snapshot(again)]) == job_families([snapshot(night.status)])


def test_counters_never_go_down_while_the_controller_runs(night: Harness) -> None:
    previous: dict[tuple[str, tuple[str, ...]], float] = {}
    for result in night.results:
        for family in job_families([snapshot(result.status)]):
            if family.spec.type is not MetricType.COUNTER:
                continue
            for sample in family.samples:
                key = (family.spec.name, sample.labels)
                assert sample.value >= previous.get(key, 0), key
                previous[key] = sample.value
    assert previous[("trainguard_faults_total", (*KEY, "trainer", "Exited"))] == 1


def test_an_unrecovered_fault_is_recovering_and_adds_no_time_yet() -> None:
    h = Harness.start(make_job(cce_spec()))
    h.running()
    h.cluster.exit(pod("trainer", 0), 137, signal=9)
    h.step()
    families = job_families([snapshot(h.status)])
    assert values(families, "trainguard_job_faults_recovering") == {KEY: 1}
    assert nonzero(families, "trainguard_job_time_lost_seconds_total") == {}
    assert nonzero(families, "trainguard_restarts_total") == {(*KEY, "trainer", "restart", "Pod", "true"): 1}


def test_a_new_job_has_every_series_at_zero_so_that_increase_sees_the_first_fault() -> None:
    families = job_families([snapshot(JobStatus())])
    faults = values(families, "trainguard_faults_total")
    assert len(faults) == 2 * 10  # two roles, every pod fault (the fault tolerance check's three among them)
    assert set(faults.values()) == {0}
    assert (*KEY, "trainer", "PodForceDeleted") in faults
    assert (*KEY, "trainer", "HardwareFault") in faults
    restarts = values(families, "trainguard_restarts_total")
    assert (*KEY, "launcher", "restart", "All", "true") in restarts
    assert len(restarts) == 2 * 3 * 2
    assert {labels[3] for labels in restarts} == {"restart"}  # a restart in place is a hang restart
    assert values(families, "trainguard_hang_detections_total") == {
        (*KEY, "launcher"): 0,
        (*KEY, "trainer"): 0,
    }
    assert values(families, "trainguard_hang_restarts_total") == {(*KEY, "launcher"): 0, (*KEY, "trainer"): 0}
    assert len(values(families, "trainguard_scale_events_total")) == 2 * 5
    (recovery,) = [f for f in families if f.spec.name == "trainguard_fault_recovery_seconds"]
    assert len(recovery.histograms) == 2 * 10
    assert all(h.count == 0 and set(h.counts) == {0} for h in recovery.histograms)
    assert len(values(families, "trainguard_job_time_lost_seconds_total")) == 10
    assert values(families, "trainguard_live_reformations_total") == {KEY: 0}


def test_jobs_by_phase_count_every_job_and_list_every_phase() -> None:
    running = JobStatus.model_validate({"phase": "Running"})
    failed = JobStatus.model_validate({"phase": "Failed"})
    families = job_families([snapshot(running, "a"), snapshot(running, "b"), snapshot(failed, "c")])
    jobs = values(families, "trainguard_jobs")
    assert len(jobs) == 9
    assert (jobs[("Running",)], jobs[("Failed",)], jobs[("Pending",)]) == (2, 1, 0)


def test_every_metric_follows_the_naming_conventions() -> None:
    for spec in (*JOB_METRICS, *CONTROLLER_METRICS):
        assert spec.name.startswith("trainguard_")
        assert spec.name.endswith("_total") == (spec.type is MetricType.COUNTER), spec.name
        if spec.type is MetricType.HISTOGRAM:
            assert spec.name.endswith("_seconds")
            assert list(spec.buckets) == sorted(spec.buckets)
        assert "job" not in spec.labels  # Prometheus' own target label


@pytest.mark.parametrize(
    ("entry", "role"),
    [
        (
            {
                "kind": "fault",
                "role": "trainer",
                "pod": f"{JOB}-trainer-2",
                "action": "restart",
                "reason": "x",
            },
            "trainer",
        ),
        ({"kind": "scale", "role": "trainer", "action": "scaleout", "reason": "r", "pods": ["p"]}, "trainer"),
        ({"kind": "grow", "role": "Worker", "action": "scaleout", "reason": "capacity returned"}, "Worker"),
        (
            {"kind": "scale-rejected", "role": "nope", "action": "none", "reason": "rejected", "scaleTo": 9},
            "nope",
        ),
        # Entries stored by earlier versions have no role: their pod's, else none (the reason is not read).
        ({"kind": "fault", "pod": f"{JOB}-trainer-2", "action": "restart", "reason": "x"}, "trainer"),
        ({"kind": "scale", "action": "scaleout", "reason": "scaleout of role trainer: 1 pods (p)"}, ""),
        ({"kind": "reformed", "action": "none", "reason": "r", "reformation": {"round": 2}}, ""),
    ],
)
def test_the_role_of_a_history_entry(entry: dict[str, str], role: str) -> None:
    assert entry_role(HistoryEntry.model_validate({"at": 1.0, **entry}), snapshot(JobStatus())) == role


def test_live_re_formations_are_counted_per_job_and_are_no_restarts() -> None:
    h = Harness.start(make_job(cce_spec()))
    h.running()
    for number in (1, 2, 3):  # the first formation is the job's start, no re-formation
        h.cluster.reform(
            pod("trainer", 0), LiveRound(at=float(number), round=number, world_size=3, step=number)
        )
        h.tick()
    families = job_families([snapshot(h.status)])
    assert values(families, "trainguard_live_reformations_total") == {KEY: 2}
    assert nonzero(families, "trainguard_restarts_total") == {}
    assert nonzero(families, "trainguard_faults_total") == {}


@pytest.mark.parametrize(
    ("observed", "counts", "total"),
    [
        ([], (0, 0, 0), 0.0),
        ([0.5], (1, 1, 1), 0.5),
        ([1.5, 2.0, 7.0], (0, 2, 2), 10.5),
    ],
)
def test_histogram_buckets_are_cumulative(
    observed: list[float], counts: tuple[int, ...], total: float
) -> None:
    sample = histogram(("x",), observed, (1.0, 2.0, 5.0))
    assert (sample.counts, sample.count, sample.sum) == (counts, len(observed), total)


def test_controller_stats_keep_latency_queue_depth_and_errors() -> None:
    stats = ControllerStats()
    for seconds in (0.0005, 0.003, 0.2, 10.0):
        stats.observe(seconds)
    stats.set_queue_depth(3)
    stats.failed()
    latency, depth, errors = stats.families()
    (sample,) = latency.histograms
    assert sample.count == 4
    assert sample.counts[0] == 1  # <= 1 ms
    assert sample.counts[-1] == 3  # <= 2.5 s: not the 10 s one
    assert sample.sum == pytest.approx(10.2035)
    assert depth.samples[0].value == 3
    assert errors.samples[0].value == 1
