"""The status as the operator stores it on the job resource (``status_document``) and reads it back
(``read_status``): condition times in Kubernetes' form, as CCE's documentation shows them. Pure: no cluster
(tests/k8s/test_operator_cce_job.py reads them from a real one)."""

from __future__ import annotations

import math
import re

from hypothesis import given
from hypothesis import strategies as st

from trainguard.api.load import load_object
from trainguard.backends.k8s.kinds import AITRAININGJOB, NATIVE
from trainguard.backends.k8s.status import read_status, status_document
from trainguard.controller.phases import JobPhase
from trainguard.controller.status import Condition, JobStatus

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
JOB = load_object(
    {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {
            "replicaSpecs": {
                "worker": {
                    "replicas": 2,
                    "template": {"spec": {"containers": [{"name": "c", "image": "i", "command": ["true"]}]}},
                }
            }
        },
    },
    "job.yaml",
).job


def _status(*times: tuple[float, float]) -> JobStatus:
    phases = [JobPhase.PENDING, JobPhase.CREATING, JobPhase.RUNNING]
    return JobStatus(
        phase=phases[len(times) - 1] if times else JobPhase.PENDING,
        conditions=tuple(
            Condition(
                type=phase,
                status="True" if i == len(times) - 1 else "False",
                reason=f"TrainingJob{phase.value}",
                message="m",
                last_transition_time=transition,
                last_probe_time=probe,
            )
            for i, (phase, (transition, probe)) in enumerate(zip(phases, times, strict=False))
        ),
        started_at=1_642_150_912.25,
    )


def test_condition_times_are_written_as_cce_shows_them() -> None:
    # 2022-01-14T09:01:52Z and 09:01:53Z, the first two conditions of CCE's example status.
    document = status_document(
        NATIVE, JOB, _status((1_642_150_912.0, 1_642_150_912.0), (1_642_150_913.4, 1_642_150_913.9))
    )
    first, second = document["conditions"]
    assert first["lastTransitionTime"] == first["lastProbeTime"] == "2022-01-14T09:01:52Z"
    assert second["lastTransitionTime"] == second["lastProbeTime"] == "2022-01-14T09:01:53Z"
    assert document["startedAt"] == 1_642_150_912.25  # every other time stays in epoch seconds
    assert document["selector"] == "trainguard.io/job=j,trainguard.io/role=worker"


def test_a_status_without_conditions_reads_back_unchanged() -> None:
    status = _status()
    assert read_status({"status": status_document(NATIVE, JOB, status)}) == status
    assert read_status({}) == JobStatus()


def test_a_status_written_before_with_epoch_condition_times_still_reads() -> None:
    status = _status((1_642_150_912.5, 1_642_150_913.5))
    assert read_status({"status": status.to_dict()}) == status


@given(
    st.lists(
        st.tuples(st.floats(0, 4_000_000_000), st.floats(0, 4_000_000_000)),
        min_size=1,
        max_size=3,
    )
)
def test_condition_times_read_back_to_the_whole_second_and_nothing_else_changes(
    times: list[tuple[float, float]],
) -> None:
    status = _status(*times)
    document = status_document(NATIVE, JOB, status)
    assert all(
        RFC3339.match(c[k]) for c in document["conditions"] for k in ("lastTransitionTime", "lastProbeTime")
    )
    again = read_status({"status": document})
    assert [(c.last_transition_time, c.last_probe_time) for c in again.conditions] == [
        (float(math.floor(t)), float(math.floor(p))) for t, p in times
    ]
    assert again.model_copy(update={"conditions": status.conditions}) == status
    # Reading and writing again changes nothing: an unchanged status is never written with new bytes.
    assert status_document(NATIVE, JOB, again) == document


def test_an_aitrainingjob_status_has_cces_restart_count_beside_trainguards_and_reads_back_without_it() -> (
    None
):
    """CCE's page shows ``status.RestartCount.trainer``; CCE's scripts read that key."""
    status = JobStatus(restart_counts={"launcher": 0, "trainer": 2})
    document = status_document(AITRAININGJOB, JOB, status)
    assert document["RestartCount"] == document["restartCounts"] == {"launcher": 0, "trainer": 2}
    assert "RestartCount" not in status_document(NATIVE, JOB, status)
    assert read_status({"status": document}) == status
