"""What every backend must do with CCE's AITrainingJob example (a launcher, 3 trainers of 1..5, its rules)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.local.jobs import cce_job, simple_job
from trainguard.controller.nudges import NUDGE_AFTER_SECONDS

from .driver import Driver, View, faults, pod, running

LAUNCHER = "cce-launcher-0"
TRAINERS = ["cce-trainer-0", "cce-trainer-1", "cce-trainer-2"]


def _started(driver: Driver) -> View:
    driver.submit(cce_job())
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
    node = pod(view, "cce-trainer-1")["node"]
    driver.node_down(node)
    view = driver.wait(
        lambda v: v["status"]["restartCounts"]["trainer"] == 1 and "cce-trainer-1" in running(v),
        "trainer-1 replaced",
    )
    assert pod(view, "cce-trainer-1")["node"] != node
    assert (faults(view)[-1]["fault"], faults(view)[-1]["rule"]) == ("NodeNotReady", "faultTolerantPolicy[0]")
    driver.node_up(node)


def test_a_force_deleted_trainer_is_replaced_and_counted(driver: Driver) -> None:
    _started(driver)
    driver.force_delete("cce-trainer-0")
    view = driver.wait(
        lambda v: v["status"]["restartCounts"]["trainer"] == 1 and "cce-trainer-0" in running(v),
        "trainer-0 replaced",
    )
    assert (faults(view)[-1]["fault"], faults(view)[-1]["counted"]) == ("PodForceDeleted", True)


def test_an_evicted_trainer_is_replaced_without_counting(driver: Driver) -> None:
    _started(driver)
    driver.evict("cce-trainer-2")
    view = driver.wait(
        lambda v: (
            bool(faults(v)) and "cce-trainer-2" in running(v) and pod(v, "cce-trainer-2")["generation"] == 2
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


def _torchrun_job(script: Path) -> dict[str, Any]:
    """A Kubeflow-style elastic PyTorch job: 3 workers in one torchrun rendezvous, a failed one restarted."""
    script.write_text("import time\nwhile True:\n    time.sleep(1)\n")
    job = simple_job("tj", ["python", str(script)], replicas=3, restartPolicy="OnFailure", restartLimit=10)
    job["spec"]["frameworkType"] = "pytorch"
    return job


def test_the_survivors_of_a_failed_torchrun_worker_are_nudged_once(driver: Driver, tmp_path: Path) -> None:
    """The controller's decision, carried out by every backend: once a worker's failure is NUDGE_AFTER_SECONDS
    old, the backend restarts the workers of the other pods that ran before it (the fake and the simulator
    record what was asked; the local runtime SIGKILLs old workers; the operator annotates the pods)."""
    workers = ["tj-worker-0", "tj-worker-1", "tj-worker-2"]
    driver.submit(_torchrun_job(tmp_path / "train.py"))
    driver.wait(
        lambda v: running(v) == workers and v["status"]["phase"] == "Running", "3 workers running", 90
    )
    driver.exit("tj-worker-1", 1)
    view = driver.wait(lambda v: len(v["nudged"]) >= 2, "the survivors nudged", NUDGE_AFTER_SECONDS + 60)
    (fault,) = [f for f in faults(view) if f["pod"] == "tj-worker-1"]
    assert view["nudged"] == {
        "tj-worker-0": f"tj-worker-1#{fault['seq']}",
        "tj-worker-2": f"tj-worker-1#{fault['seq']}",
    }
    # The failed pod comes back and the job goes on; no failure, no second nudge.
    view = driver.wait(lambda v: running(v) == workers, "tj-worker-1 back", 90)
    assert view["status"]["phase"] == "Running"
    assert set(view["nudged"]) == {"tj-worker-0", "tj-worker-2"}
