"""The simulated cluster as a backend: placement, capacity, removal, idempotency, what it shows."""

from __future__ import annotations

import pytest

from trainguard.api import TrainingJob
from trainguard.backends.sim import SimCluster, VirtualClock
from trainguard.backends.sim.pods import CPU_POOL, GPU_POOL
from trainguard.controller import JobStatus, LaunchPod, ObservedPhase, TerminatePod, WriteStatus
from trainguard.controller.launchspec import LaunchSpec

from .helpers import job

JOB: TrainingJob = job()


def cluster(gpu: int = 3, launch_rate: float | None = None, stop_seconds: float = 0.0) -> SimCluster:
    return SimCluster.build(
        VirtualClock(),
        {GPU_POOL: gpu, CPU_POOL: 1},
        {"launcher": CPU_POOL},
        launch_rate=launch_rate,
        stop_seconds=stop_seconds,
    )


def launch(pod: str, generation: int = 1, role: str = "worker", avoid: tuple[str, ...] = ()) -> LaunchPod:
    index = int(pod.rsplit("-", 1)[1])
    spec = LaunchSpec(argv=(), env=(), rank=index, world_size=1, role_sizes=())
    return LaunchPod(f"{pod}/g{generation}/launch", pod, role, index, generation, 0, "start", spec, avoid)


def run_clock(sim: SimCluster, until: float) -> None:
    clock = sim.clock
    while (when := clock.next_time()) is not None and when <= until:
        clock.pop()()


def test_pods_go_to_free_nodes_of_their_pool_one_per_node() -> None:
    sim = cluster()
    sim.apply(
        JOB, [launch("llm-worker-0"), launch("llm-worker-1"), launch("llm-launcher-0", role="launcher")]
    )
    placed = {pod.name: pod.node for pod in sim.observe(JOB).pods}
    assert placed == {"llm-worker-0": "node-0", "llm-worker-1": "node-1", "llm-launcher-0": "cpu-0"}
    assert all(pod.phase is ObservedPhase.RUNNING for pod in sim.observe(JOB).pods)


def test_an_action_applied_twice_happens_once_and_a_taken_name_is_an_error() -> None:
    sim = cluster()
    sim.apply(JOB, [launch("llm-worker-0"), launch("llm-worker-0")])
    assert len(sim.pods) == 1
    assert not sim.errors
    sim.apply(JOB, [launch("llm-worker-0", generation=2)])
    assert [error.key for error in sim.errors] == ["llm-worker-0/g2/launch"]
    assert "already exists" in sim.observe(JOB).errors[0].message


def test_launched_pods_start_after_their_share_of_the_creation_throughput() -> None:
    sim = cluster(gpu=4, launch_rate=2.0)
    sim.apply(JOB, [launch(f"llm-worker-{i}") for i in range(4)])
    assert {pod.phase for pod in sim.observe(JOB).pods} == {ObservedPhase.PENDING}
    run_clock(sim, 1.9)
    assert {pod.phase for pod in sim.observe(JOB).pods} == {ObservedPhase.PENDING}
    run_clock(sim, 2.0)  # 4 pods at 2 per second
    assert {(pod.phase, pod.started_at) for pod in sim.observe(JOB).pods} == {(ObservedPhase.RUNNING, 2.0)}


def test_a_pod_without_a_free_node_waits_and_avoids_the_node_it_lost_until_that_is_repaired() -> None:
    sim = cluster(gpu=2)
    sim.apply(JOB, [launch("llm-worker-0"), launch("llm-worker-1")])
    sim.node_down("node-0")
    sim.apply(JOB, [TerminatePod("t0", "llm-worker-0", 1, "lost", force=True)])
    sim.apply(JOB, [launch("llm-worker-0", 2, avoid=("node-0",))])
    assert list(sim.unplaced()) == ["llm-worker-0"]
    assert sim.waiting_for_capacity(["llm-worker-0"])
    sim.node_up("node-0")
    assert sim.pods["llm-worker-0"].node == "node-0"
    assert not sim.waiting_for_capacity(["llm-worker-0"])


def test_a_cordoned_node_takes_no_new_pods_until_uncordoned() -> None:
    sim = cluster(gpu=1)
    sim.cordon("node-0")
    sim.apply(JOB, [launch("llm-worker-0")])
    assert sim.pods["llm-worker-0"].node is None
    sim.uncordon("node-0")
    assert sim.pods["llm-worker-0"].node == "node-0"


def test_a_running_pod_takes_the_grace_period_to_stop_an_ended_or_forced_one_goes_at_once() -> None:
    sim = cluster(stop_seconds=30.0)
    sim.apply(JOB, [launch("llm-worker-0"), launch("llm-worker-1"), launch("llm-worker-2")])
    sim.exit("llm-worker-1", 1)
    sim.apply(
        JOB,
        [
            TerminatePod("t0", "llm-worker-0", 1, "scope All"),
            TerminatePod("t1", "llm-worker-1", 1, "failed"),
            TerminatePod("t2", "llm-worker-2", 1, "node lost", force=True),
        ],
    )
    assert sorted(sim.pods) == ["llm-worker-0"]
    assert sim.observe(JOB).pods[0].terminating
    run_clock(sim, 30.0)
    assert not sim.pods


def test_observe_lists_every_pod_but_only_the_nodes_the_controller_can_use() -> None:
    sim = cluster(gpu=4)
    sim.apply(JOB, [launch("llm-worker-0"), launch("llm-worker-1")])
    sim.node_down("node-1")
    nodes = {node.name: (node.ready, node.free_slots) for node in sim.observe(JOB).nodes}
    # node-0 is Ready and full: left out (a node the controller does not find is Ready)
    assert nodes == {"node-1": (False, 0), "node-2": (True, 1), "node-3": (True, 1), "cpu-0": (True, 1)}
    assert len(sim.observe(JOB).pods) == 2


def test_a_status_write_older_than_the_stored_one_is_refused() -> None:
    sim = cluster()
    sim.apply(JOB, [WriteStatus("s2", JobStatus(revision=2))])
    sim.apply(JOB, [WriteStatus("s1", JobStatus(revision=1))])
    assert sim.stored is not None
    assert sim.stored.revision == 2
    assert [error.key for error in sim.errors] == ["s1"]


def test_the_version_moves_with_every_change_observe_would_show() -> None:
    sim = cluster()
    before = sim.version
    sim.observe(JOB)
    assert sim.version == before
    sim.apply(JOB, [launch("llm-worker-0")])
    assert sim.version > before


@pytest.mark.parametrize("code", [0, 1])
def test_an_exit_shows_the_code_and_the_phase(code: int) -> None:
    sim = cluster()
    sim.apply(JOB, [launch("llm-worker-0")])
    sim.exit("llm-worker-0", code)
    (pod,) = sim.observe(JOB).pods
    assert (pod.phase, pod.exit_code) == (
        ObservedPhase.SUCCEEDED if code == 0 else ObservedPhase.FAILED,
        code,
    )
