"""No job wedges the control plane: a job at the largest size the model allows (100,000 pods) is accepted at
once and held (more than this machine runs), and while it is there, get, scale and delete answer within 2 s
and the small job next to it goes on as before. A held job that is made small enough starts; a started job is
never grown past the local runtime's limit."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from trainguard.api.model import MAX_REPLICAS
from trainguard.backends.local.capacity import DEFAULT_MAX_PODS, ENV_MAX_PODS

from .harness import LocalRuntime, Result
from .jobs import SLEEPING, TICKING, simple_job

pytestmark = pytest.mark.integration

#: How long get, scale, delete and run --detach may take, whatever else the control plane does.
ANSWER_SECONDS = 2.0


def _timed(action: Callable[[], Result]) -> tuple[Result, float]:
    started = time.monotonic()
    result = action()
    return result, time.monotonic() - started


def _answers_in_time(local: LocalRuntime, *argv: str) -> Result:
    result, seconds = _timed(lambda: local.cli(*argv))
    assert result.code == 0, (argv, result.out, result.err)
    assert seconds < ANSWER_SECONDS, f"trainguard {' '.join(argv)} took {seconds:.2f} s"
    return result


def _pods(view: dict[str, Any], phase: str) -> int:
    return sum(1 for pod in view["status"]["pods"] if pod["phase"] == phase)


def test_a_job_at_the_limit_leaves_the_control_plane_responsive(local: LocalRuntime) -> None:
    small = local.submit(simple_job("small", TICKING, 1, minReplicas=1, maxReplicas=3))
    local.wait_running(small, 1)
    big = local.write_job(
        simple_job("big", SLEEPING, MAX_REPLICAS, minReplicas=1, maxReplicas=MAX_REPLICAS), "big.yaml"
    )

    submitted = _answers_in_time(local, "run", str(big), "--detach")
    assert "job big submitted" in submitted.out
    assert f"job big waits: it has {MAX_REPLICAS:,} pods" in submitted.err
    assert f"at most {DEFAULT_MAX_PODS} pods of a job" in submitted.err
    held = local.wait("big", lambda view: view["status"].get("reason") == "Unschedulable", what="big held")
    assert held["status"]["phase"] == "Pending"
    assert held["status"]["pods"] == []

    for _ in range(3):  # the loop goes round meanwhile; every answer stays prompt
        listing = _answers_in_time(local, "get")
        assert "small" in listing.out
        assert "big" in listing.out
        _answers_in_time(local, "get", "small", "-o", "json")
        _answers_in_time(local, "get", "big", "-o", "wide")
        time.sleep(0.3)
    _answers_in_time(local, "scale", "small", "--role", "worker", "--replicas", "2")
    _answers_in_time(local, "delete", "big")  # waits until it is gone
    assert local.call("exists", job="big") is False
    assert "big" not in {name.split("-")[0] for name in local.pod_processes()}

    view = local.wait_running(small, 2)  # the small job went on and scaled as asked
    assert view["status"]["restartCounts"] == {"worker": 0}
    assert _pods(view, "Running") == 2


def test_a_held_job_made_small_enough_starts(local: LocalRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_MAX_PODS, "4")  # the control plane this test starts runs 4 pods of a job at most
    job = simple_job("wide", SLEEPING, 6, minReplicas=1, maxReplicas=8)
    result = local.cli("run", str(local.write_job(job)), "--detach")
    assert result.code == 0, result.err
    assert "job wide waits: it has 6 pods and the local runtime runs at most 4 pods" in result.err
    local.wait("wide", lambda view: view["status"].get("reason") == "Unschedulable", what="held")

    scaled = local.cli("scale", "wide", "--role", "worker", "--replicas", "3")
    assert scaled.code == 0, scaled.err
    view = local.wait_running("wide", 3)
    assert view["spec"]["replicaSpecs"]["worker"]["replicas"] == 3
    assert sorted(local.pod_processes()) == [f"wide-worker-{i}" for i in range(3)]

    before = {name: [p.pid for p in procs] for name, procs in local.pod_processes().items()}
    refused = local.cli("scale", "wide", "--role", "worker", "--replicas", "5")
    assert refused.code == 2
    assert "the job would have 5 pods; the local runtime runs at most 4 pods of a job" in refused.err
    assert "Traceback" not in refused.err
    grown = local.cli("scale", "wide", "--role", "worker", "--replicas", "4")
    assert grown.code == 0, grown.err
    view = local.wait_running("wide", 4)
    after = {name: [p.pid for p in procs] for name, procs in local.pod_processes().items()}
    assert {name: pids for name, pids in after.items() if name in before} == before  # untouched
    assert view["status"]["restartCounts"] == {"worker": 0}
