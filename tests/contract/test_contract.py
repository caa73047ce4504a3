"""What every backend must do with seed 000's job (a launcher, 3 trainers of 1..5, the seed's rules)."""

from __future__ import annotations

from tests.integration.local.jobs import seed_job

from .driver import Driver, View, faults, pod, running

LAUNCHER = "seed-launcher-0"
TRAINERS = ["seed-trainer-0", "seed-trainer-1", "seed-trainer-2"]


def _started(driver: Driver) -> View:
    driver.submit(seed_job())
    return driver.wait(
        lambda v: len(running(v)) == 4 and v["status"]["phase"] == "Running", "all 4 pods running"
    )


def test_a_job_starts_with_its_pods_named_job_role_index(driver: Driver) -> None:
    view = _started(driver)
    assert running(view) == [LAUNCHER, *TRAINERS]
    assert view["status"]["replicas"] == {"launcher": 1, "trainer": 3}
    assert view["status"]["restartCounts"] == {"launcher": 0, "trainer": 0}
    phases = [c["type"] for c in view["status"]["conditions"]]
    assert phases[0] == "Pending"
    assert "Running" in phases
    assert len({pod(view, name)["node"] for name in running(view)}) == 4


def test_launcher_exit_129_restarts_it_and_exit_1_fails_the_job(driver: Driver) -> None:
    _started(driver)
    driver.exit(LAUNCHER, 129)
    view = driver.wait(
        lambda v: v["status"]["restartCounts"]["launcher"] == 1 and LAUNCHER in running(v),
        "launcher restarted",
    )
    assert pod(view, LAUNCHER)["generation"] == 2
    assert faults(view)[-1]["rule"] == "faultTolerantPolicy[0]"
    driver.exit(LAUNCHER, 1)
    view = driver.wait(lambda v: v["status"]["phase"] == "Failed", "job failed")
    assert faults(view)[-1]["action"] == "fail-job"


def test_launcher_success_completes_the_job_while_trainers_run(driver: Driver) -> None:
    _started(driver)
    driver.exit(LAUNCHER, 0)
    view = driver.wait(lambda v: v["status"]["phase"] == "Succeeded", "job succeeded")
    assert [pod(view, name)["phase"] for name in TRAINERS] == ["Running"] * 3  # cleanPodPolicy None


def test_a_trainer_on_a_node_that_goes_down_is_replaced_elsewhere(driver: Driver) -> None:
    view = _started(driver)
    node = pod(view, "seed-trainer-1")["node"]
    driver.node_down(node)
    view = driver.wait(
        lambda v: v["status"]["restartCounts"]["trainer"] == 1 and "seed-trainer-1" in running(v),
        "trainer-1 replaced",
    )
    assert pod(view, "seed-trainer-1")["node"] != node
    assert (faults(view)[-1]["fault"], faults(view)[-1]["rule"]) == ("NodeNotReady", "faultTolerantPolicy[0]")
    driver.node_up(node)


def test_a_force_deleted_trainer_is_replaced_and_counted(driver: Driver) -> None:
    _started(driver)
    driver.force_delete("seed-trainer-0")
    view = driver.wait(
        lambda v: v["status"]["restartCounts"]["trainer"] == 1 and "seed-trainer-0" in running(v),
        "trainer-0 replaced",
    )
    assert (faults(view)[-1]["fault"], faults(view)[-1]["counted"]) == ("PodForceDeleted", True)


def test_an_evicted_trainer_is_replaced_without_counting(driver: Driver) -> None:
    _started(driver)
    driver.evict("seed-trainer-2")
    view = driver.wait(
        lambda v: (
            bool(faults(v)) and "seed-trainer-2" in running(v) and pod(v, "seed-trainer-2")["generation"] == 2
        ),
        "trainer-2 replaced",
    )
    assert (faults(view)[-1]["fault"], faults(view)[-1]["counted"]) == ("PodEvicted", False)


def test_scaling_trainers_out_and_in(driver: Driver) -> None:
    _started(driver)
    driver.scale("trainer", 5)
    view = driver.wait(lambda v: len(running(v, "trainer")) == 5, "5 trainers")
    assert view["status"]["replicas"]["trainer"] == 5
    driver.scale("trainer", 2)
    view = driver.wait(lambda v: running(v, "trainer") == TRAINERS[:2], "2 trainers")
    assert view["status"]["replicas"]["trainer"] == 2
    assert [e["action"] for e in view["status"]["history"] if e["kind"] == "scale"] == ["scaleout", "scalein"]
    assert view["status"]["restartCounts"] == {"launcher": 0, "trainer": 0}
