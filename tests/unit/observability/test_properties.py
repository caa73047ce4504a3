"""Random fault sequences (those of the controller's property tests), checking what is derived from the
status after every step: the metrics agree with the history and their counters never go down; the timeline
has one mark per fault, and its lanes are ordered, disjoint intervals inside the picture."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.controller.harness import Harness
from tests.unit.controller.test_properties import faults, inject, jobs
from trainguard.controller import JobStatus
from trainguard.observability.metrics import JobSnapshot, MetricType, job_families
from trainguard.observability.timeline import build

JOB = "test-horovod-elastic"


def counters(status: JobStatus) -> dict[tuple[str, tuple[str, ...]], float]:
    snapshot = JobSnapshot("default", JOB, ("launcher", "trainer"), status)
    found = {}
    for family in job_families([snapshot]):
        if family.spec.type is MetricType.COUNTER:
            found.update({(family.spec.name, s.labels): s.value for s in family.samples})
        for histogram in family.histograms:
            found[(family.spec.name + "_count", histogram.labels)] = histogram.count
    return found


def check(status: JobStatus, previous: dict[tuple[str, tuple[str, ...]], float]) -> None:
    now = counters(status)
    for key, value in previous.items():
        assert now.get(key, 0) >= value, key
    fault_entries = [e for e in status.history if e.kind == "fault" and e.pod is not None]
    faults_total = sum(v for (name, _), v in now.items() if name == "trainguard_faults_total")
    assert faults_total == len([e for e in status.history if e.kind == "fault"])
    recovered = sum(v for (name, _), v in now.items() if name == "trainguard_fault_recovery_seconds_count")
    assert recovered == len([e for e in status.history if e.recovery_seconds is not None])

    timeline = build(JOB, status.to_dict())
    assert [mark.seq for mark in timeline.faults] == [e.seq for e in fault_entries]
    for lane in timeline.lanes:
        ends = [timeline.start]
        for segment in lane.segments:
            assert segment.start < segment.end, lane.pod
            assert segment.start >= ends[-1], lane.pod
            ends.append(segment.end)
        assert ends[-1] <= timeline.end
    previous.update(now)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=jobs(), sequence=st.lists(faults, min_size=1, max_size=20))
def test_metrics_and_timeline_follow_any_history(job: Any, sequence: list[tuple[Any, ...]]) -> None:
    h = Harness.start(job, nodes=7)
    seen: dict[tuple[str, tuple[str, ...]], float] = {}
    for _ in range(3):
        h.step()
        h.cluster.advance(1)
    for fault in sequence:
        inject(h, fault)
        h.step()
        check(h.status, seen)
        h.cluster.advance(1)
        h.step()
        check(h.status, seen)
