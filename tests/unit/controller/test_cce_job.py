"""CCE's AITrainingJob example (test-horovod-elastic) end to end: reconcile against the fake cluster."""

from __future__ import annotations

from tests.unit.controller.harness import Harness, cce_spec, make_job
from trainguard.controller import JobPhase, LaunchPod, PodPhase, TerminatePod
from trainguard.controller.actuate import UNSEEN_LAUNCH_S
from trainguard.controller.backend import ObservedPhase
from trainguard.controller.scaling import JOIN_TOGETHER_S

LAUNCHER = "test-horovod-elastic-launcher-0"
TRAINER_1 = "test-horovod-elastic-trainer-1"


def test_starts_pending_then_creating_then_running_with_cces_conditions() -> None:
    h = Harness.start(start_seconds=2)
    h.step()
    assert h.status.phase is JobPhase.PENDING
    assert h.status.conditions[-1].message == "all pods are waiting for scheduling"
    h.cluster.advance(1)  # scheduled, containers starting
    h.step()
    assert h.status.phase is JobPhase.CREATING
    assert h.status.conditions[-1].message.startswith(f"pods [{LAUNCHER} ")
    assert h.status.conditions[-1].message.endswith("] creating containers")
    h.running()
    types = [(c.type, c.status, c.reason) for c in h.status.conditions]
    assert types == [
        (JobPhase.PENDING, "False", "TrainingJobPending"),
        (JobPhase.CREATING, "False", "TrainingJobCreating"),
        (JobPhase.RUNNING, "True", "TrainingJobRunning"),
    ]
    assert h.status.conditions[-1].message == "all pods are running"
    assert h.status.replicas == {"launcher": 1, "trainer": 3}
    assert h.status.restart_counts == {"launcher": 0, "trainer": 0}
    assert [p.name for p in h.status.pods] == [
        LAUNCHER,
        *(f"test-horovod-elastic-trainer-{i}" for i in range(3)),
    ]


def test_launcher_exit_129_restarts_that_pod_only() -> None:
    h = Harness.start()
    h.running()
    trainers_before = [p for p in h.status.pods if p.role == "trainer"]
    h.cluster.exit(LAUNCHER, 129)
    h.step()
    assert h.status.phase is JobPhase.RESTARTING
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    launcher = h.pod(LAUNCHER)
    assert (launcher.generation, launcher.restarts, launcher.phase) == (2, 1, PodPhase.RUNNING)
    assert [p for p in h.status.pods if p.role == "trainer"] == trainers_before
    assert h.status.restart_counts == {"launcher": 1, "trainer": 0}
    [entry] = h.status.history
    assert (entry.pod, entry.fault, entry.exit_code, entry.rule, entry.action, entry.scope) == (
        LAUNCHER,
        "Exited",
        129,
        "faultTolerantPolicy[0]",
        "restart",
        "Pod",
    )
    assert entry.counters["roleRestarts"] == 1
    warning = next(e for e in h.cluster.events() if e.reason == "Exited")
    assert (warning.type.value, warning.pod, warning.message) == ("Warning", LAUNCHER, entry.reason)
    assert entry.recovery_seconds is not None
    assert entry.recovery_seconds > 0


def test_launcher_exit_1_fails_the_job() -> None:
    h = Harness.start()
    h.running()
    h.cluster.exit(LAUNCHER, 1)
    h.step()
    assert h.status.phase is JobPhase.FAILED
    assert h.status.conditions[-1].type is JobPhase.FAILED
    assert "failPolicy Any" in h.status.conditions[-1].message
    assert h.pod(LAUNCHER).phase is PodPhase.FAILED
    assert not any(isinstance(a, LaunchPod) and a.pod == LAUNCHER and a.generation > 1 for a in h.cluster.log)


def test_trainer_on_a_node_that_goes_not_ready_is_replaced_on_another_node() -> None:
    h = Harness.start()
    h.running()
    lost = h.pod(TRAINER_1).node
    h.cluster.node_down(lost)
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING and h.pod(TRAINER_1).generation == 2)
    replaced = h.pod(TRAINER_1)
    assert replaced.node not in (None, lost)
    assert h.cluster.pods[TRAINER_1].node == replaced.node
    [entry] = h.status.history
    assert (entry.fault, entry.rule, entry.node) == ("NodeNotReady", "faultTolerantPolicy[0]", lost)
    forced = [a for a in h.cluster.log if isinstance(a, TerminatePod) and a.pod == TRAINER_1]
    assert [a.force for a in forced] == [True]


def test_force_deleted_trainer_is_replaced() -> None:
    h = Harness.start()
    h.running()
    h.cluster.force_delete(TRAINER_1)
    h.step()
    assert h.status.phase is JobPhase.RESTARTING
    h.run_until(lambda h: h.status.phase is JobPhase.RUNNING)
    assert h.pod(TRAINER_1).generation == 2
    assert len(h.cluster.running("trainer")) == 3
    [entry] = h.status.history
    assert (entry.fault, entry.action, entry.recovered_at is not None) == ("PodForceDeleted", "restart", True)


def test_launcher_success_ends_the_job_while_trainers_still_run_and_clean_pod_policy_none_keeps_them() -> (
    None
):
    h = Harness.start()
    h.running()
    h.cluster.exit(LAUNCHER, 0)
    h.step()
    assert h.status.phase is JobPhase.SUCCEEDED
    assert h.pod(LAUNCHER).phase is PodPhase.SUCCEEDED
    for _ in range(3):
        h.tick()
    assert len(h.cluster.running("trainer")) == 3
    assert not any(isinstance(a, TerminatePod) for a in h.cluster.log)


def test_launcher_success_with_clean_pod_policy_running_stops_the_trainers_and_keeps_the_launcher() -> None:
    h = Harness.start(make_job(cce_spec(cleanPodPolicy="Running")))
    h.running()
    h.cluster.exit(LAUNCHER, 0)
    h.run_until(lambda h: not h.cluster.running())
    assert h.status.phase is JobPhase.SUCCEEDED
    assert h.cluster.pods[LAUNCHER].phase is ObservedPhase.SUCCEEDED
    assert {p.phase for p in h.status.pods if p.role == "trainer"} == {PodPhase.REMOVED}


def test_launcher_success_with_clean_pod_policy_all_removes_every_pod() -> None:
    h = Harness.start(make_job(cce_spec(cleanPodPolicy="All")))
    h.running()
    h.cluster.exit(LAUNCHER, 0)
    h.run_until(lambda h: not h.cluster.pods)
    assert h.status.phase is JobPhase.SUCCEEDED


def test_horovod_discovery_lists_the_running_trainers() -> None:
    h = Harness.start()
    h.running()
    h.step()
    assert h.cluster.discovery == tuple(f"test-horovod-elastic-trainer-{i}:1" for i in range(3))
    h.cluster.force_delete(TRAINER_1)
    h.step()
    assert TRAINER_1 + ":1" not in h.cluster.discovery
    h.run_until(lambda h: len(h.cluster.discovery) == 3)


def test_a_trainer_is_listed_for_horovod_once_ready_and_stays_listed_while_it_runs() -> None:
    """horovodrun blacklists for good a host it could not ssh to: a replacement is listed only once Ready (its
    sshd answers); a listed trainer whose readiness drops stays listed (Horovod would stop its worker)."""
    h = Harness.start()
    h.running()
    h.step()
    listed = tuple(f"test-horovod-elastic-trainer-{i}:1" for i in range(3))
    assert h.cluster.discovery == listed
    h.cluster.pods["test-horovod-elastic-trainer-0"].ready = False
    h.tick()
    assert h.cluster.discovery == listed
    h.cluster.unready.add(TRAINER_1)
    h.cluster.force_delete(TRAINER_1)
    h.run_until(lambda h: h.pod(TRAINER_1).phase is PodPhase.RUNNING and h.pod(TRAINER_1).generation > 0)
    for _ in range(5):
        h.tick()
        assert h.cluster.discovery == (listed[0], listed[2])
    h.cluster.pods[TRAINER_1].ready = True
    h.step()
    assert h.cluster.discovery == listed


TRAINER_2 = "test-horovod-elastic-trainer-2"


def _replaced_unready(h: Harness, *names: str) -> tuple[str, ...]:
    """Force-deletes ``names``, whose replacements start unready; returns the list once they left it."""
    h.running()
    h.step()
    for name in names:
        h.cluster.unready.add(name)
        h.cluster.force_delete(name)
    h.run_until(lambda h: all(h.pod(n).phase is PodPhase.RUNNING and h.pod(n).generation > 1 for n in names))
    remaining = tuple(
        f"test-horovod-elastic-trainer-{i}:1"
        for i in range(3)
        if f"test-horovod-elastic-trainer-{i}" not in names
    )
    assert h.cluster.discovery == remaining
    return remaining


def test_trainers_that_start_together_are_listed_for_horovod_together() -> None:
    """Horovod 0.28.1 drops a host update that reaches its workers during a reset: a replacement ready first
    waits for the others starting with it, and they are listed in one update."""
    h = Harness.start()
    remaining = _replaced_unready(h, TRAINER_1, TRAINER_2)
    version = h.cluster.discovery_version
    h.cluster.pods[TRAINER_1].ready = True
    for _ in range(10):
        h.tick()
        assert h.cluster.discovery == remaining, "listed before the trainer starting with it was ready"
    h.cluster.pods[TRAINER_2].ready = True
    h.step()
    assert h.cluster.discovery == tuple(f"test-horovod-elastic-trainer-{i}:1" for i in range(3))
    assert h.cluster.discovery_version == version + 1


def test_a_ready_trainer_waits_for_the_others_a_bounded_time() -> None:
    """A trainer that never gets ready holds the others back for JOIN_TOGETHER_S from its launch, no longer, and
    the controller asks to be called again when that time is up."""
    h = Harness.start()
    _replaced_unready(h, TRAINER_1, TRAINER_2)
    launched = h.pod(TRAINER_2).launched_at
    h.cluster.pods[TRAINER_1].ready = True
    result = h.step()
    assert result.wake_at is not None
    assert result.wake_at <= launched + JOIN_TOGETHER_S
    h.run_until(lambda h: TRAINER_1 + ":1" in h.cluster.discovery, limit=int(JOIN_TOGETHER_S) + 5)
    assert h.cluster.now >= launched + JOIN_TOGETHER_S
    assert TRAINER_2 + ":1" not in h.cluster.discovery


def test_a_pod_deleted_before_it_was_ever_listed_is_launched_again() -> None:
    """A scaled-out trainer's pod went before the controller saw it (force-deleted at once): the slot does not
    wait for it for ever (a restart's start has restartTimeLimit; a scale-out's or a grow-back's had nothing);
    UNSEEN_LAUNCH_S after its launch it is launched again as a new incarnation, with a Warning, and the job is
    Running again (found by the property test: a node's loss, a grow-back, then a force-deletion)."""
    h = Harness.start()
    h.running()
    h.cluster.scale("trainer", 4)
    new = "test-horovod-elastic-trainer-3"
    h.run_until(lambda h: new in h.cluster.pods)
    launched = h.pod(new)
    del h.cluster.pods[new]  # gone before any reconcile listed it
    result = h.step()
    assert (h.pod(new).generation, h.pod(new).seen) == (launched.generation, False)
    assert result.wake_at is not None
    assert launched.launched_at is not None
    assert result.wake_at <= launched.launched_at + UNSEEN_LAUNCH_S
    h.run_until(
        lambda h: h.status.phase is JobPhase.RUNNING and new in h.cluster.running(),
        limit=int(UNSEEN_LAUNCH_S) + 30,
    )
    assert h.pod(new).generation == launched.generation + 1
    assert h.cluster.now >= launched.launched_at + UNSEEN_LAUNCH_S
    assert [e.pod for e in h.cluster.events() if e.reason == "PodNotListed"] == [new]
