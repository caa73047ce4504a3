"""``benchmarks/_kwok.py``: kwok's pod-complete Stage narrowed to Kubernetes' own Jobs, so that Volcano's Job
(also of kind ``Job``) keeps its pods running on the benchmarks' kwok cluster."""

from __future__ import annotations

from typing import Any

from benchmarks._kwok import BATCH_JOBS_ONLY, batch_jobs_only


def stage() -> dict[str, Any]:
    owner = {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]}
    return {
        "metadata": {"name": "pod-complete", "resourceVersion": "42"},
        "spec": {"selector": {"matchExpressions": [owner]}, "next": {"delete": False}},
    }


def test_narrowed_to_batch_jobs_once() -> None:
    original = stage()
    narrowed = batch_jobs_only(original)
    assert narrowed["spec"]["selector"]["matchExpressions"][-1] == BATCH_JOBS_ONLY
    assert len(narrowed["spec"]["selector"]["matchExpressions"]) == 2
    assert narrowed["metadata"]["resourceVersion"] == "42"  # a replace at the version read
    assert narrowed["spec"]["next"] == original["spec"]["next"]
    assert len(original["spec"]["selector"]["matchExpressions"]) == 1  # what was read is left as it was
    assert batch_jobs_only(narrowed) == narrowed
