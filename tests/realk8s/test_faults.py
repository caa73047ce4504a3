"""Faults on real nodes, in real containers, with the operator installed by the chart: a Kubeflow PyTorchJob on
the stock PyTorch image (3 elastic workers, 2 to 3) survives the kill -9 of a worker's torchrun agent and
training process, a forced deletion of a worker pod, and ``kubectl scale`` 3 -> 2 -> 3 while it trains; each
time training goes on (rank 0 prints its next step) and the job succeeds. Each test prints the time from its
fault to the next completed training step (what docs/operator.md records)."""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import yaml

from tests.realk8s.real import EXAMPLES, RealCluster, wait_for

pytestmark = pytest.mark.timeout(900)

EXAMPLE = yaml.safe_load((EXAMPLES / "pytorchjob-stock-image.yaml").read_text())
_STEP = re.compile(r"^(\S+) step (\d+)/(\d+) world (\d+) ")


@pytest.fixture(scope="module")
def trainer(operator: RealCluster) -> Iterator[RealCluster]:
    """The example's training script in its ConfigMap, for every job of this module."""
    operator.kubectl("create", "configmap", "train-elastic", f"--from-file={EXAMPLES / 'train_elastic.py'}")
    try:
        yield operator
    finally:
        operator.kubectl("delete", "configmap", "train-elastic")


def _job(name: str, steps: int) -> dict[str, Any]:
    """The example's PyTorchJob under another name, training ``steps`` steps a round."""
    job = copy.deepcopy(EXAMPLE)
    job["metadata"]["name"] = name
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["command"][-1] = str(steps)
    return job


def _workers(cluster: RealCluster, name: str) -> list[dict[str, Any]]:
    pods = cluster.json("get", "pods", "-l", f"trainguard.io/job={name},trainguard.io/role=worker")["items"]
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def _steps(cluster: RealCluster, name: str) -> list[tuple[float, int, int]]:
    """(time, step, world) of every step rank 0 printed in the workers' current containers."""
    found = []
    for pod in _workers(cluster, name):
        if pod["status"].get("phase") not in ("Running", "Succeeded"):
            continue
        done = cluster.kubectl_result("logs", "--timestamps", pod["metadata"]["name"])
        for line in done.splitlines():
            match = _STEP.match(line)
            if match:
                stamp = datetime.fromisoformat(match[1].replace("Z", "+00:00")[:26] + "+00:00")
                found.append((stamp.timestamp(), int(match[2]), int(match[4])))
    return sorted(found)


def _step_after(cluster: RealCluster, name: str, since: float, world: int | None = None) -> float | None:
    """When rank 0 completed its first step after ``since`` (in a world of ``world``), if it did."""
    return next(
        (at for at, _, size in _steps(cluster, name) if at > since and (world is None or size == world)), None
    )


def _status(cluster: RealCluster, name: str) -> dict[str, Any]:
    return dict(cluster.json("get", "pytorchjob", name).get("status") or {})


@pytest.fixture
def job(trainer: RealCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A job of 3 workers, training: its name. Deleted afterwards."""
    name = request.param
    trainer.apply(_job(name, steps=240))
    try:
        wait_for(f"{name} to train", lambda: _step_after(trainer, name, 0.0, world=3), 480, every=2)
        yield name
    finally:
        trainer.kubectl("delete", "pytorchjob", name, "--wait=false")


def _succeeds(cluster: RealCluster, name: str) -> dict[str, Any]:
    wait_for(
        f"{name} to end", lambda: _status(cluster, name).get("phase") in ("Succeeded", "Failed"), 600, every=2
    )
    status = _status(cluster, name)
    assert status["phase"] == "Succeeded", status.get("message")
    return status


def _report(scenario: str, fault_at: float, step_at: float) -> None:
    print(f"\nfault-to-next-step {scenario}: {step_at - fault_at:.1f} s")


KILL = """
import os, signal
mine = os.getpid()
for pid in os.listdir('/proc'):
    if not pid.isdigit() or int(pid) == mine:
        continue
    try:
        cmdline = open('/proc/%s/cmdline' % pid, 'rb').read()
    except OSError:
        continue
    if b'trainguard.torchrun' in cmdline or b'train_elastic.py' in cmdline:
        os.kill(int(pid), signal.SIGKILL)
        print('killed', pid)
"""


@pytest.mark.parametrize("job", ["kill9"], indirect=True)
def test_kill_9_of_a_workers_agent_and_training_process(trainer: RealCluster, job: str) -> None:
    victim = f"{job}-worker-1"
    fault_at = time.time()
    killed = trainer.kubectl("exec", victim, "-c", "pytorch", "--", "python3", "-c", KILL)
    assert killed.count("killed") >= 2, killed  # torchrun's agent and the training process
    step_at = wait_for("training to go on", lambda: _step_after(trainer, job, fault_at + 1), 300, every=2)
    _report("kill -9 of torchrun and its worker", fault_at, step_at)
    wait_for("all 3 workers back", lambda: _step_after(trainer, job, step_at, world=3), 300, every=2)
    status = _succeeds(trainer, job)
    (fault,) = [h for h in status["history"] if h.get("pod") == victim and h["kind"] == "fault"]
    assert (fault["fault"], fault["exitCode"], fault["action"]) == ("Exited", 137, "restart")
    assert status["restartCounts"]["worker"] == 1
    events = trainer.json("get", "events", "--field-selector", f"involvedObject.name={victim}")["items"]
    created = [e for e in events if e["reason"] == "SuccessfulCreatePod"]
    assert len(created) == 2, [e["message"] for e in created]  # the first incarnation, and its replacement


@pytest.mark.parametrize("job", ["forced"], indirect=True)
def test_a_force_deleted_worker_is_replaced(trainer: RealCluster, job: str) -> None:
    victim = f"{job}-worker-2"
    before = trainer.pod(victim)["metadata"]["uid"]
    fault_at = time.time()
    trainer.kubectl("delete", "pod", victim, "--force", "--grace-period=0")
    wait_for("the replacement", lambda: trainer.json("get", "pods", "-l", f"trainguard.io/job={job}")
             and _uid(trainer, victim) not in (None, before), 120)  # fmt: skip
    step_at = wait_for("training to go on", lambda: _step_after(trainer, job, fault_at + 1), 300, every=2)
    _report("forced deletion of a worker pod", fault_at, step_at)
    wait_for("all 3 workers back", lambda: _step_after(trainer, job, step_at, world=3), 300, every=2)
    status = _succeeds(trainer, job)
    (fault,) = [h for h in status["history"] if h.get("pod") == victim and h["kind"] == "fault"]
    assert fault["fault"] == "PodForceDeleted"


def _uid(cluster: RealCluster, pod: str) -> str | None:
    pods = cluster.json("get", "pods", "--field-selector", f"metadata.name={pod}")["items"]
    return pods[0]["metadata"]["uid"] if pods else None


@pytest.mark.parametrize("job", ["scaled"], indirect=True)
def test_kubectl_scale_3_to_2_to_3_while_it_trains(trainer: RealCluster, job: str) -> None:
    scaled_at = time.time()
    trainer.kubectl("scale", f"pytorchjob/{job}", "--replicas=2")
    step_at = wait_for(
        "a step in a world of 2", lambda: _step_after(trainer, job, scaled_at, world=2), 300, every=2
    )
    _report("scale 3 -> 2", scaled_at, step_at)
    assert len(_workers(trainer, job)) == 2
    scaled_at = time.time()
    trainer.kubectl("scale", f"pytorchjob/{job}", "--replicas=3")
    step_at = wait_for(
        "a step in a world of 3", lambda: _step_after(trainer, job, scaled_at, world=3), 300, every=2
    )
    _report("scale 2 -> 3", scaled_at, step_at)
    status = _succeeds(trainer, job)
    scales = [h for h in status["history"] if h["kind"] == "scale"]
    assert [(h["scaleFrom"], h["scaleTo"]) for h in scales] == [(3, 2), (2, 3)]
    assert status["restartCounts"]["worker"] == 0  # a resize is no fault
