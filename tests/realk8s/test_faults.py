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
                found.append((_stamp(match[1]), int(match[2]), int(match[4])))
    return sorted(found)


def _stamp(text: str) -> float:
    """Seconds since the epoch of kubectl's RFC 3339 timestamp ("2026-11-24T21:52:25.9162Z": nanoseconds at
    most, trailing zeros dropped)."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    seconds = datetime.fromisoformat(whole + "+00:00").timestamp()
    return seconds + float(f"0.{fraction or '0'}")


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


def _hang_job() -> dict[str, Any]:
    """trainguard's own form of the example, with hang handling: 20 s without a heartbeat is a hang."""
    worker = copy.deepcopy(EXAMPLE["spec"]["pytorchReplicaSpecs"]["Worker"])
    worker["template"]["spec"]["containers"][0]["command"][-1] = "240"
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "hang", "namespace": "default"},
        "spec": {
            "frameworkType": "pytorch",
            "hang": {"timeoutSeconds": HANG_TIMEOUT, "maxConsecutive": 3, "gracePeriodSeconds": 5},
            "elastic": {"rdzvBackend": "c10d", "nProcPerNode": 1, "maxRestarts": 10},
            "replicaSpecs": {
                "worker": {
                    "replicas": 3,
                    "minReplicas": 2,
                    "maxReplicas": 3,
                    "restartPolicy": "OnFailure",
                    "template": worker["template"],
                }
            },
        },
    }


HANG_TIMEOUT = 20
#: SIGSTOP to the training processes: the leaves of the container's process tree below torchrun's agent (the
#: agent is PID 1, torchrun its child; the workers have no children of their own), not this script.
STOP = """
import os, signal
parents = {}
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            stat = open('/proc/%s/stat' % pid).read()
        except OSError:
            continue
        parents[int(pid)] = int(stat.rsplit(')', 1)[1].split()[1])
mine = os.getpid()
for pid, parent in parents.items():
    if pid in (1, mine) or parent in (0, 1) or pid in parents.values():
        continue
    os.kill(pid, signal.SIGSTOP)
    print('stopped', pid)
"""
_HANG_SAID = re.compile(r"^(\S+) \[trainguard agent\] hang: no heartbeat for ")


def test_a_stopped_rank_is_restarted_in_place_by_the_agent_in_its_container(trainer: RealCluster) -> None:
    trainer.apply(_hang_job())
    try:
        wait_for("hang to train", lambda: _step_after(trainer, "hang", 0.0, world=3) if _workers(trainer, "hang") else None, 480, every=2)  # fmt: skip
        victim = "hang-worker-1"
        uid = trainer.pod(victim)["metadata"]["uid"]
        stopped_at = time.time()
        stopped = trainer.kubectl("exec", victim, "-c", "pytorch", "--", "python3", "-c", STOP)
        assert "stopped" in stopped, stopped

        def detected() -> float | None:
            for line in trainer.kubectl_result("logs", "--timestamps", victim).splitlines():
                said = _HANG_SAID.match(line)
                if said:
                    at = _stamp(said[1])
                    if at > stopped_at:
                        return at
            return None

        detected_at = wait_for("the agent to see the hang", detected, 120, every=2)
        print(
            f"\nSIGSTOP to the agent's restart in place: {detected_at - stopped_at:.1f} s (timeout {HANG_TIMEOUT} s)"
        )
        assert detected_at - stopped_at <= HANG_TIMEOUT + 2 + 1  # + the exec's own second
        step_at = wait_for(
            "training to go on", lambda: _step_after(trainer, "hang", detected_at), 300, every=2
        )
        _report("SIGSTOP of a rank's training process", stopped_at, step_at)
        wait_for(
            "hang to end",
            lambda: (
                (trainer.json("get", "trainingjob", "hang").get("status") or {}).get("phase")
                in ("Succeeded", "Failed")
            ),
            600,
            every=2,
        )
        status = trainer.json("get", "trainingjob", "hang")["status"]
        assert status["phase"] == "Succeeded", status.get("message")
        # Restarted in place, in the same pod: no relaunch, nothing counted.
        assert trainer.pod(victim)["metadata"]["uid"] == uid
        assert status["restartCounts"] == {"worker": 0}
        assert not [h for h in status.get("history", []) if h["kind"] == "fault"]
    finally:
        trainer.kubectl("delete", "trainingjob", "hang", "--wait=false")


@pytest.mark.parametrize("job", ["nodefail"], indirect=True)
def test_a_dead_nodes_workers_are_replaced_on_the_other_node(trainer: RealCluster, job: str) -> None:
    victim = f"{job}-worker-1"
    dead = trainer.pod(victim)["spec"]["nodeName"]
    (alive,) = [n for n in trainer.real_nodes() if n != dead]
    lost = {p["metadata"]["name"] for p in _workers(trainer, job) if p["spec"]["nodeName"] == dead}
    fault_at = time.time()
    trainer.stop_node(dead)
    try:
        wait_for(f"{dead} to go NotReady", lambda: not trainer.node_ready(dead), 90)

        def replaced() -> bool:
            pods = {p["metadata"]["name"]: p for p in _workers(trainer, job)}
            return all(
                name in pods
                and pods[name]["spec"].get("nodeName") == alive
                and pods[name]["status"].get("phase") == "Running"
                for name in lost
            )

        wait_for("the lost workers to run on the other node", replaced, 300, every=2)
        step_at = wait_for("training to go on", lambda: _step_after(trainer, job, fault_at + 1), 400, every=2)
        _report(f"node lost ({len(lost)} of 3 workers on it)", fault_at, step_at)
        status = _succeeds(trainer, job)
        faults = {h["pod"]: h for h in status["history"] if h["kind"] == "fault"}
        assert faults[victim]["fault"] == "NodeNotReady"
        assert faults[victim]["node"] == dead
    finally:
        trainer.start_node(dead)
        wait_for(f"{dead} to be Ready again", lambda: trainer.node_ready(dead), 120)
