"""CCE's scaling timeout (``spec.scaling``): a scale-out whose pods do not all run within it is rolled back, or
fails the job; the pods that ran stay; the controller wakes when the next one is due."""

from __future__ import annotations

import pytest

from tests.unit.controller.harness import Harness, cce_spec, make_job
from trainguard.controller import JobPhase, PodPhase, TerminatePod
from trainguard.controller.launchspec import Network, launch_spec

JOB = "test-horovod-elastic"
TIMEOUT = 30


def _full(on_timeout: str = "RollBack") -> Harness:
    """CCE's job (a launcher and 3 trainers) on 4 nodes of one pod each: room for nothing more."""
    job = make_job(cce_spec(scaling={"timeoutSeconds": TIMEOUT, "onTimeout": on_timeout}))
    h = Harness.start(job, nodes=4)
    h.running()
    return h


def _timeouts(h: Harness) -> list[str]:
    return [e.message for e in h.cluster.events() if e.reason == "ScaleTimeout"]


def test_a_scale_out_that_finds_no_room_is_rolled_back_after_the_timeout() -> None:
    h = _full()
    h.cluster.scale("trainer", 5)
    asked = h.cluster.now
    h.step()
    late = [f"{JOB}-trainer-3", f"{JOB}-trainer-4"]
    assert h.results[-1].wake_at == pytest.approx(asked + TIMEOUT)
    h.run_until(lambda h: h.cluster.now >= asked + TIMEOUT - 1)
    assert h.status.phase is JobPhase.SCALING
    assert not _timeouts(h)  # not before its time
    h.run_until(lambda h: bool(_timeouts(h)))
    assert h.cluster.now >= asked + TIMEOUT
    entry = h.status.history[-1]
    assert (entry.kind, entry.action, entry.pods, entry.scale_from, entry.scale_to) == (
        "scale-timeout",
        "scalein",
        tuple(late),
        5,
        3,
    )
    assert _timeouts(h) == [
        f"scaling timeout of role trainer: 2 pods ({', '.join(late)}) not running {TIMEOUT} s after the "
        "scale-out; rolled back to 3 replicas"
    ]
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert h.status.replicas["trainer"] == 3
    assert [h.pod(name).phase for name in late] == [PodPhase.REMOVED, PodPhase.REMOVED]
    assert len(h.cluster.running("trainer")) == 3
    terminated = [a.pod for a in h.cluster.log if isinstance(a, TerminatePod)]
    assert set(late) <= set(terminated)  # their pending pods are gone from the cluster too


def test_the_pods_that_ran_stay_only_the_late_ones_go() -> None:
    h = _full()
    h.cluster.scale("trainer", 5)
    asked = h.cluster.now
    h.step()
    h.cluster.add_node("node-extra")  # room for one of the two
    h.run_until(lambda h: len(h.cluster.running("trainer")) == 4)
    h.run_until(lambda h: bool(_timeouts(h)))
    assert h.cluster.now >= asked + TIMEOUT
    entry = h.status.history[-1]
    assert (entry.pods, entry.scale_from, entry.scale_to) == ((f"{JOB}-trainer-4",), 5, 4)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert h.status.replicas["trainer"] == 4
    # A later scale-out is a step of its own, with its own clock.
    h.cluster.scale("trainer", 5)
    again = h.cluster.now
    h.run_until(lambda h: len(_timeouts(h)) == 2)
    assert h.cluster.now >= again + TIMEOUT


def test_a_scale_out_whose_pods_all_run_in_time_never_times_out() -> None:
    h = _full()
    h.cluster.add_node("node-extra")
    h.cluster.scale("trainer", 4)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING and len(h.cluster.running("trainer")) == 4)
    assert all(p.scaled_at is None for p in h.status.pods)  # the clock stopped once each ran
    h.run_until(lambda h: h.cluster.now > TIMEOUT * 3, seconds=5)
    assert not _timeouts(h)
    assert h.status.replicas["trainer"] == 4


def test_on_timeout_fail_fails_the_job_naming_the_pods() -> None:
    h = _full(on_timeout="Fail")
    h.cluster.scale("trainer", 4)
    h.run_until(lambda h: h.status.phase.is_terminal)
    assert h.status.phase is JobPhase.FAILED
    assert f"{JOB}-trainer-3" in h.status.message
    assert "spec.scaling.onTimeout is Fail" in h.status.message
    assert [e.pods for e in h.status.history if e.kind == "scale-timeout"] == [(f"{JOB}-trainer-3",)]


def test_a_horovod_launcher_waits_for_hosts_as_long_as_the_scaling_timeout() -> None:
    job = make_job(cce_spec(scaling={"timeoutSeconds": 120}))
    sizes = {"launcher": 1, "trainer": 3}
    launcher = launch_spec(job, "launcher", 0, 1, 0, sizes, Network()).environment
    trainer = launch_spec(job, "trainer", 0, 1, 0, sizes, Network()).environment
    assert launcher["HOROVOD_ELASTIC_TIMEOUT"] == "120"
    assert "HOROVOD_ELASTIC_TIMEOUT" not in trainer
    default = launch_spec(make_job(), "launcher", 0, 1, 0, sizes, Network()).environment
    assert default["HOROVOD_ELASTIC_TIMEOUT"] == "600"  # Horovod's own default
