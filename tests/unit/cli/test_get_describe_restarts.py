"""``trainguard get`` and ``describe`` show hang restarts in place on their own, never among the restarts."""

from __future__ import annotations

from typing import Any

from tests.unit.controller.harness import Harness, worker_job
from trainguard.backends.local import views
from trainguard.backends.local.records import JobRecord
from trainguard.controller import JobPhase

W0 = "job-worker-0"


def _view(h: Harness) -> dict[str, Any]:
    spec = {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "job"},
        "spec": h.job.model_dump(mode="json", by_alias=True, exclude_none=True)["spec"],
    }
    record = JobRecord("job", "uid-1", spec, 1, h.status.to_dict(), 1, 0.0, 0)
    return views.job_view(record, [])


def _hung_once() -> Harness:
    h = Harness.start(worker_job(1, job={"hang": {"maxConsecutive": 3}}))
    h.running()
    h.cluster.hang(W0)
    h.step()
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    return h


def _cells(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_get_json_has_the_counts_in_camel_case() -> None:
    status = _view(_hung_once())["status"]
    assert status["restartCounts"] == {"master": 0, "worker": 0}
    assert status["hangRestartCounts"] == {"master": 0, "worker": 1}
    pods = {pod["name"]: (pod["restarts"], pod["hangRestarts"]) for pod in status["pods"]}
    assert pods == {"job-master-0": (0, 0), W0: (0, 1)}


def test_the_tables_have_a_hang_restarts_column_of_their_own() -> None:
    view = _view(_hung_once())
    header, *rows = _cells(views.pods_table(view))
    assert header == ["POD", "ROLE", "NODE", "PHASE", "RESTARTS", "HANG-RESTARTS"]
    assert {row[0]: row[4:] for row in rows} == {"job-master-0": ["0", "0"], W0: ["0", "1"]}
    header, row = _cells(views.jobs_table([view], now=10.0))
    assert header[3:5] == ["RESTARTS", "HANG-RESTARTS"]
    assert row[3:5] == ["0", "1"]
    assert views.summary_line(view, now=10.0).endswith(
        " - restarts master=0 worker=0 - hang restarts master=0 worker=1"
    )


def test_a_job_without_hang_restarts_has_no_hang_words_in_its_summary() -> None:
    h = Harness.start(worker_job(1))
    h.running()
    view = _view(h)
    assert views.summary_line(view, now=10.0).endswith(" - restarts master=0 worker=0")
    assert _cells(views.pods_table(view))[1][4:] == ["0", "0"]


def test_describe_says_restarts_and_hang_restarts_per_role() -> None:
    text = views.describe(_view(_hung_once()), [], now=10.0)
    [worker] = [line for line in text.splitlines() if line.startswith("  worker:")]
    assert worker.endswith(", restarts 0, hang restarts 1")
    assert "HANG-RESTARTS" in text


def test_a_view_of_an_older_status_shows_zero_hang_restarts() -> None:
    h = _hung_once()
    older = h.status.to_dict()
    del older["hangRestartCounts"]
    for pod in older["pods"]:
        del pod["hangRestarts"]
    record = JobRecord("job", "uid-1", {"metadata": {"name": "job"}, "spec": {}}, 1, older, 1, 0.0, 0)
    view = views.job_view(record, [])
    assert view["status"]["hangRestartCounts"] == {}
    assert {pod["hangRestarts"] for pod in view["status"]["pods"]} == {0}
    assert "hang restarts" not in views.summary_line(view, now=10.0)
