"""Faults on real nodes, in real containers, with the operator installed by the chart: one job on the stock
PyTorch image (the example's script, 3 elastic workers, 2 to 3, hang handling on) survives, one after the
other, the kill -9 of a training process alone (torchrun restarts it inside the pod; the history and the
Events record it all the same), the kill -9 of a worker's torchrun agent and training process, a forced deletion of a worker pod,
``kubectl scale`` 3 -> 2 -> 3, a rank stopped with SIGSTOP, and the death of a node; each time training goes on
(rank 0 prints its next step), and the job succeeds. One job for all of them: a job's start (torch imported in
three containers, a rendezvous) is the slow part. The time from each fault to the next completed training step
is printed (what docs/operator.md records)."""

from __future__ import annotations

import copy
import os
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.realk8s.real import EXAMPLES, FENCE_SECONDS, RealCluster, log_stamp, wait_for
from trainguard.pod import contract
from trainguard.pod.workerevents import FORK_SERVER_NAME

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


def _workers(cluster: RealCluster, name: str) -> list[dict[str, Any]]:
    pods = cluster.json("get", "pods", "-l", f"trainguard.io/job={name},trainguard.io/role=worker")["items"]
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def _steps(cluster: RealCluster, name: str) -> list[tuple[float, int, int]]:
    """(time, step, world) of every step rank 0 printed in the workers' current containers."""
    found = []
    for pod in _workers(cluster, name):
        if pod["status"].get("phase") not in ("Running", "Succeeded"):
            continue
        # A dead node's kubelet never answers: its pods' logs are skipped after 10 s (rank 0 there prints no step).
        done = cluster.logs(pod["metadata"]["name"], timestamps=True, timeout=10)
        for line in done.splitlines():
            match = _STEP.match(line)
            if match:
                found.append((log_stamp(match[1]), int(match[2]), int(match[4])))
    return sorted(found)


def _step_after(cluster: RealCluster, name: str, since: float, world: int | None = None) -> float | None:
    """When rank 0 completed its first step after ``since`` (in a world of ``world``), if it did."""
    return next(
        (at for at, _, size in _steps(cluster, name) if at > since and (world is None or size == world)), None
    )


def _explain(cluster: RealCluster, name: str, lines: int = 60) -> str:
    """The job's phase, its last history entries, and each worker pod's state and last log lines (of the
    container before, too, when it restarted): what a failed wait says of where the job got stuck."""
    status = _status(cluster, name)
    parts = [f"job {name}: phase {status.get('phase')}, history (last 8): {status.get('history', [])[-8:]}"]
    for pod in _workers(cluster, name):
        pod_name = pod["metadata"]["name"]
        containers = pod["status"].get("containerStatuses") or []
        restarts = sum(c.get("restartCount", 0) for c in containers)
        parts.append(f"--- pod {pod_name} on {pod['spec'].get('nodeName')}: {pod['status'].get('phase')}, "
                     f"{restarts} restarts, states {[c.get('state') for c in containers]}")  # fmt: skip
        for previous in ([True] if restarts else []) + [False]:
            logs = cluster.logs(pod_name, previous=previous)
            # Not torch's C++ stack frames: the lines that say where the workers are.
            kept = [
                line
                for line in logs.splitlines()
                if not line.startswith(("frame #", "Exception raised from"))
            ]
            parts.append(("(previous container)\n" if previous else "") + "\n".join(kept[-lines:]))
    return "\n".join(parts)


def _status(cluster: RealCluster, name: str) -> dict[str, Any]:
    return dict(cluster.json("get", "trainingjob", name).get("status") or {})


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
    if b'trainguard.pod.torchrun' in cmdline or b'train_elastic.py' in cmdline:
        os.kill(int(pid), signal.SIGKILL)
        print('killed', pid)
"""


#: In-container Python: every process's parent (from /proc), as ``parents``.
PARENTS = """
import os, signal
parents = {}
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            stat = open('/proc/%s/stat' % pid).read()
        except OSError:
            continue
        parents[int(pid)] = int(stat.rsplit(')', 1)[1].split()[1])
"""


def _store_running(cluster: RealCluster, name: str, old_uid: str) -> bool:
    """Whether the job's store pod is a new one (not ``old_uid``) and running."""
    found = cluster.json("get", "pods", "--field-selector", f"metadata.name={name}")["items"]
    return (
        bool(found)
        and found[0]["metadata"]["uid"] != old_uid
        and found[0]["status"].get("phase") == "Running"
    )


#: SIGKILL to the training process alone: the children of the fork server that trainguard's torchrun forks
#: its workers from (torchrun's agent and the fork server go on).
KILL_WORKER = (
    PARENTS
    + """
def read(pid, what):
    try:
        return open('/proc/%d/%s' % (pid, what), 'rb').read()
    except OSError:
        return b''
def fork_server(pid):
    return b'forkserver' in read(pid, 'cmdline') or read(pid, 'comm').strip() == b'"""
    + FORK_SERVER_NAME
    + """'
for pid, parent in parents.items():
    if fork_server(parent) and b'resource_tracker' not in read(pid, 'cmdline'):
        os.kill(pid, signal.SIGKILL)
        print('killed', pid)
"""
)


#: SIGSTOP to the training processes: the leaves of the container's process tree below torchrun's agent (the
#: agent is PID 1, torchrun its child; the workers have no children of their own), not this script.
STOP = (
    PARENTS
    + """
mine = os.getpid()
for pid, parent in parents.items():
    if pid in (1, mine) or parent in (0, 1) or pid in parents.values():
        continue
    os.kill(pid, signal.SIGSTOP)
    print('stopped', pid)
"""
)


def _uid(cluster: RealCluster, pod: str) -> str | None:
    pods = cluster.json("get", "pods", "--field-selector", f"metadata.name={pod}")["items"]
    return pods[0]["metadata"]["uid"] if pods else None


JOB = "survivor"
HANG_TIMEOUT = 15
#: Steps a round: long enough that no round ends between two faults, short enough for the job to end soon after.
STEPS = 200
_HANG_SAID = re.compile(r"^(\S+) \[trainguard agent\] hang: no heartbeat for ")


def _survivor() -> dict[str, Any]:
    """The example's workers in trainguard's own form, with hang handling: HANG_TIMEOUT s without a heartbeat."""
    template = copy.deepcopy(EXAMPLE["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])
    template["spec"]["containers"][0]["command"][-1] = str(STEPS)
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": JOB, "namespace": "default"},
        "spec": {
            "frameworkType": "pytorch",
            "hang": {"timeoutSeconds": HANG_TIMEOUT, "maxConsecutive": 3, "gracePeriodSeconds": 5},
            "elastic": {"rdzvBackend": "c10d", "nProcPerNode": 1, "maxRestarts": 20},
            "replicaSpecs": {
                "worker": {
                    "replicas": 3,
                    "minReplicas": 2,
                    "maxReplicas": 3,
                    "restartPolicy": "OnFailure",
                    "restartLimit": 20,
                    "template": template,
                }
            },
        },
    }


def _report(scenario: str, fault_at: float, step_at: float) -> None:
    print(f"\nfault-to-next-step {scenario}: {step_at - fault_at:.1f} s")


def _faults(cluster: RealCluster) -> list[dict[str, Any]]:
    """The faults of pods that the operator acted on (not torchrun's restarts of workers inside pods)."""
    return [
        h
        for h in _status(cluster, JOB).get("history", [])
        if h["kind"] == "fault" and h["action"] != "restart-workers"
    ]


def _inside(cluster: RealCluster, pod: str) -> list[dict[str, Any]] | None:
    """The history's restarts of ``pod``'s workers by torchrun inside the pod, if there are any yet."""
    history = _status(cluster, JOB).get("history", [])
    return [h for h in history if h["action"] == "restart-workers" and h["pod"] == pod] or None


def _events(cluster: RealCluster, pod: str, reason: str) -> list[dict[str, Any]] | None:
    selector = f"involvedObject.name={pod},reason={reason}"
    return cluster.json("get", "events", "--field-selector", selector)["items"] or None


def _goes_on(cluster: RealCluster, scenario: str, fault_at: float, job: str = JOB) -> float:
    """Waits for rank 0's next step of ``job`` after the fault (printing how long it took), then for a world
    of 3."""
    step_at = wait_for(
        f"training to go on after {scenario}",
        lambda: _step_after(cluster, job, fault_at + 1),
        400,
        every=2,
        explain=lambda: _explain(cluster, job),
    )
    _report(scenario, fault_at, step_at)
    wait_for(
        f"3 workers after {scenario}",
        lambda: _step_after(cluster, job, step_at, world=3),
        400,
        every=2,
        explain=lambda: _explain(cluster, job),
    )
    return step_at


def _hang_seen(cluster: RealCluster, pod: str, since: float) -> float | None:
    for line in cluster.logs(pod, timestamps=True).splitlines():
        said = _HANG_SAID.match(line)
        if said and log_stamp(said[1]) > since:
            return log_stamp(said[1])
    return None


def test_a_job_on_the_stock_image_survives_every_fault_in_turn(trainer: RealCluster) -> None:
    trainer.apply(_survivor())
    dead: str | None = None
    try:
        wait_for("the job to train", lambda: _step_after(trainer, JOB, 0.0, world=3), 480, every=2)

        # kill -9 of the training process alone: torchrun restarts it inside the pod, and the agent's report
        # puts that restart in the job's history and Events, though no pod ended.
        victim = f"{JOB}-worker-2"
        uid = _uid(trainer, victim)
        fault_at = time.time()
        assert "killed" in trainer.kubectl(
            "exec", victim, "-c", "pytorch", "--", "python3", "-c", KILL_WORKER
        )
        _goes_on(trainer, "kill -9 of the training process alone", fault_at)
        inside = wait_for("the restart inside the pod in the history", lambda: _inside(trainer, victim), 60)
        assert (inside[0]["fault"], inside[0]["exitCode"], inside[0]["rule"], inside[0]["counted"]) == (
            "Exited",
            137,
            "torchrun",
            False,
        )
        assert wait_for("a WorkersRestarted Event", lambda: _events(trainer, victim, "WorkersRestarted"), 30)
        assert _uid(trainer, victim) == uid  # the same pod went on
        assert not _faults(trainer)  # nothing relaunched, nothing counted

        # kill -9 of a worker's torchrun agent and training process: the command dies, the pod is relaunched.
        victim = f"{JOB}-worker-1"
        fault_at = time.time()
        killed = trainer.kubectl("exec", victim, "-c", "pytorch", "--", "python3", "-c", KILL)
        assert killed.count("killed") >= 2, killed
        _goes_on(trainer, "kill -9 of torchrun and its worker", fault_at)
        (fault,) = [h for h in _faults(trainer) if h["pod"] == victim]
        assert (fault["fault"], fault["exitCode"], fault["action"]) == ("Exited", 137, "restart")
        events = trainer.json("get", "events", "--field-selector", f"involvedObject.name={victim}")["items"]
        assert (
            len([e for e in events if e["reason"] == "SuccessfulCreatePod"]) == 2
        )  # the first, and its replacement

        # A forced deletion: the pod is created again.
        victim = f"{JOB}-worker-2"
        before = _uid(trainer, victim)
        fault_at = time.time()
        trainer.kubectl("delete", "pod", victim, "--force", "--grace-period=0")
        _goes_on(trainer, "forced deletion of a worker pod", fault_at)
        assert _uid(trainer, victim) not in (None, before)
        assert [h["fault"] for h in _faults(trainer) if h["pod"] == victim] == ["PodForceDeleted"]

        # kubectl scale 3 -> 2 -> 3: scale steps, no fault.
        scaled_at = time.time()
        trainer.kubectl("scale", f"trainingjob/{JOB}", "--replicas=2")
        step_at = wait_for(
            "a world of 2", lambda: _step_after(trainer, JOB, scaled_at, world=2), 300, every=2
        )
        _report("scale 3 -> 2", scaled_at, step_at)
        assert len(_workers(trainer, JOB)) == 2
        scaled_at = time.time()
        trainer.kubectl("scale", f"trainingjob/{JOB}", "--replicas=3")
        step_at = wait_for(
            "a world of 3", lambda: _step_after(trainer, JOB, scaled_at, world=3), 300, every=2
        )
        _report("scale 2 -> 3", scaled_at, step_at)
        scales = [h for h in _status(trainer, JOB)["history"] if h["kind"] == "scale"]
        assert [(h["scaleFrom"], h["scaleTo"]) for h in scales] == [(3, 2), (2, 3)]

        # SIGSTOP of a rank's training process: the agent in that container restarts it in place.
        victim = f"{JOB}-worker-0"
        uid = _uid(trainer, victim)
        stopped_at = time.time()
        assert "stopped" in trainer.kubectl("exec", victim, "-c", "pytorch", "--", "python3", "-c", STOP)
        seen_at = wait_for(
            "the agent to see the hang", lambda: _hang_seen(trainer, victim, stopped_at), 120, every=2
        )
        print(
            f"\nSIGSTOP to the agent's restart in place: {seen_at - stopped_at:.1f} s (timeout {HANG_TIMEOUT} s)"
        )
        assert seen_at - stopped_at <= HANG_TIMEOUT + 2 + 1  # + the exec's own second
        _goes_on(trainer, "SIGSTOP of a rank's training process", stopped_at)
        # The same pod: restarted in place, not relaunched (else: why, from the job's history and the pods).
        assert _uid(trainer, victim) == uid, _explain(trainer, JOB)
        # Recorded (the agent reported it), not counted.
        hang = wait_for(
            "the hang in the history",
            lambda: [h for h in _faults(trainer) if h["pod"] == victim and h["fault"] == "Hang"],
            60,
        )
        assert [(h["action"], h["counted"]) for h in hang] == [("restart-in-place", False)]
        # The stopped rank blocked its peers in their collective too: their agents, seeing no heartbeat
        # either, may restart theirs in place as well. Each such restart is recorded, none is counted.
        hangs = [h for h in _faults(trainer) if h["fault"] == "Hang"]
        assert all((h["action"], h["counted"]) == ("restart-in-place", False) for h in hangs), hangs
        assert _status(trainer, JOB)["hangRestartCounts"] == {"worker": len(hangs)}

        # A node dies: its workers are replaced on the other node.
        victim = f"{JOB}-worker-1"
        dead = trainer.pod(victim)["spec"]["nodeName"]
        (alive,) = [n for n in trainer.real_nodes() if n != dead]
        lost = [p["metadata"]["name"] for p in _workers(trainer, JOB) if p["spec"]["nodeName"] == dead]
        fault_at = time.time()
        trainer.stop_node(dead)
        wait_for(f"{dead} to go NotReady", lambda: not trainer.node_ready(dead), 90)
        _goes_on(trainer, f"a node lost ({len(lost)} of 3 workers on it)", fault_at)
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in _workers(trainer, JOB)}
        assert all(placed.get(name) == alive for name in lost), placed
        assert {h["pod"]: h["fault"] for h in _faults(trainer) if h.get("node") == dead}.get(
            victim
        ) == "NodeNotReady"
        trainer.start_node(dead)
        wait_for(f"{dead} to be Ready again", lambda: trainer.node_ready(dead), 120)
        dead = None

        wait_for(
            "the job to end",
            lambda: _status(trainer, JOB).get("phase") in ("Succeeded", "Failed"),
            600,
            every=2,
        )
        status = _status(trainer, JOB)
        assert status["phase"] == "Succeeded", status.get("message")
        # Relaunches: the killed pod, the deleted one, and the dead node's; the hang restart is not one.
        assert status["restartCounts"] == {"worker": 2 + len(lost)}
    finally:
        if dead is not None:
            trainer.start_node(dead)
        trainer.kubectl("delete", "trainingjob", JOB, "--wait=false")


SNAPSHOT_JOB = "remembers"
_RESUMED = re.compile(r"^(\S+) rank (\d+) resumed at step (\d+) from (\w+)", re.MULTILINE)


def _resumes(cluster: RealCluster, since: float) -> dict[str, list[tuple[int, int, str]]]:
    """Per worker pod: (rank, step, source) of each time its current container's training resumed after
    ``since``, in order."""
    found = {}
    for pod in _workers(cluster, SNAPSHOT_JOB):
        logs = cluster.logs(pod["metadata"]["name"], timestamps=True)
        found[pod["metadata"]["name"]] = [
            (int(m[2]), int(m[3]), m[4]) for m in _RESUMED.finditer(logs) if log_stamp(m[1]) > since
        ]
    return found


def _all_three_resumed(cluster: RealCluster, since: float) -> dict[str, list[tuple[int, int, str]]] | None:
    """The resumes of each pod after ``since``, once all three pods' newest are one round (the same step)."""
    found = _resumes(cluster, since)
    if len(found) == 3 and all(found.values()) and len({resumes[-1][1] for resumes in found.values()}) == 1:
        return found
    return None


def test_with_memory_snapshots_a_deleted_pod_costs_at_most_one_step(trainer: RealCluster) -> None:
    """The example with ``--snapshots``: every step in the pod's shared memory (the operator's memory-backed
    emptyDir) and on a peer pod. A worker pod force-deleted takes its memory with it; its replacement gets the
    newest step from a peer over the pod network, the others read their own memory, and training resumes at
    the step it had reached (rank 0's next step is the one after it, at most one step done again)."""
    job = _survivor()
    job["metadata"]["name"] = SNAPSHOT_JOB
    del job["spec"]["hang"]
    job["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["containers"][0]["command"].append(
        "--snapshots"
    )
    trainer.apply(job)
    try:
        wait_for("the job to train", lambda: _step_after(trainer, SNAPSHOT_JOB, 0.0, world=3), 480, every=2)
        pod = trainer.pod(f"{SNAPSHOT_JOB}-worker-0")
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "trainguard-snapshots"]
        assert volume["emptyDir"] == {"medium": "Memory"}
        wait_for(
            "step 10", lambda: max((s for _, s, _ in _steps(trainer, SNAPSHOT_JOB)), default=0) >= 10, 120
        )

        victim = f"{SNAPSHOT_JOB}-worker-2"
        fault_at = time.time()
        reached = max(step for at, step, _ in _steps(trainer, SNAPSHOT_JOB) if at <= fault_at)
        trainer.kubectl("delete", "pod", victim, "--force", "--grace-period=0")
        resumed = wait_for(
            "every rank to resume",
            lambda: _all_three_resumed(trainer, fault_at),
            400,
            every=2,
            explain=lambda: _explain(trainer, SNAPSHOT_JOB),
        )
        step_at = wait_for(
            "training to go on", lambda: _step_after(trainer, SNAPSHOT_JOB, fault_at + 1), 300, every=2
        )
        _report("forced deletion with memory snapshots", fault_at, step_at)
        # The survivors may go on as a world of two first (minReplicas 2) and take the replacement in at a later
        # step; either way the first resume after the fault goes back at most one step, and the round of all
        # three is one step for all.
        first = min(step for resumes in resumed.values() for _, step, _ in resumes[:1])
        assert first >= reached - 1, (reached, resumed)
        # The replacement pod's memory is empty: a peer sends it the step; the others read their own memory.
        survivors = [resume for pod, resumes in resumed.items() if pod != victim for resume in resumes]
        assert {source for _, _, source in survivors} == {"memory"}, resumed
        assert [source for _, _, source in resumed[victim]][-1] == "peer", resumed
    finally:
        trainer.kubectl("delete", "trainingjob", SNAPSHOT_JOB, "--wait=false")


LIVE_JOB = "stays-alive"
_LIVE = re.compile(r"live rank (\d+) round (\d+) world (\d+) step (\d+) from (\w+) pid (\d+)")


def _training_pid(cluster: RealCluster, pod: str) -> int:
    """The pid (in its container) of the pod's training process, as its own lines say."""
    lines = [_LIVE.search(line) for line in cluster.logs(pod).splitlines()]
    return int([match for match in lines if match][-1][6])


#: SIGKILL to the training process alone (not the live launcher, whose command line names the script too).
KILL_TRAINING = """
import os, signal
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try:
            cmdline = open('/proc/%s/cmdline' % pid, 'rb').read()
        except OSError:
            continue
        if b'train_elastic.py' in cmdline and b'trainguard.pod.torchrun' not in cmdline:
            os.kill(int(pid), signal.SIGKILL)
            print('killed', pid)
"""


def test_a_live_jobs_survivors_keep_their_processes_through_a_kill_and_a_resize(trainer: RealCluster) -> None:
    """The example with ``--live`` and ``trainguard.io/live: "true"`` on the stock image (the operator delivers
    the SDK and the live launcher): a training process killed is restarted alone and rejoins, and a scale
    3 -> 2 removes one pod; both times the other pods' training processes are the same (their pids), and
    training goes on from the step it reached. Then the job's store pod is deleted: the two train on through its
    re-creation, in their processes, no round ended."""
    job = _survivor()
    job["metadata"]["name"] = LIVE_JOB
    job["metadata"]["annotations"] = {"trainguard.io/live": "true"}
    del job["spec"]["hang"]
    container = job["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["containers"][0]
    container["command"].append("--live")
    # Each step of forming a round in the pods' logs: what a round that stalled waited for.
    container["env"] = [*container.get("env", []), {"name": "TRAINGUARD_LIVE_TRACE", "value": "1"}]
    trainer.apply(job)
    try:
        wait_for(
            "the live job to train with 3",
            lambda: _step_after(trainer, LIVE_JOB, 0.0, world=3),
            480,
            every=2,
            explain=lambda: _explain(trainer, LIVE_JOB),
        )
        pods = [f"{LIVE_JOB}-worker-{i}" for i in range(3)]
        before = {pod: _training_pid(trainer, pod) for pod in pods}

        # 1. The training process of worker-2 killed: the launcher restarts it alone; it rejoins from a peer.
        killed_at = time.time()
        reached = max(step for at, step, _ in _steps(trainer, LIVE_JOB) if at <= killed_at)
        killed = trainer.kubectl("exec", pods[2], "--", "python", "-c", KILL_TRAINING)
        assert killed.split() == ["killed", str(before[pods[2]])], (killed, before)
        step_at = wait_for(
            "the survivors' next step",
            lambda: _step_after(trainer, LIVE_JOB, killed_at),
            120,
            every=1,
            explain=lambda: _explain(trainer, LIVE_JOB),
        )
        _report("live: a training process killed", killed_at, step_at)
        assert min(step for at, step, _ in _steps(trainer, LIVE_JOB) if at > killed_at) >= reached
        # The launcher started a new training process in the same container; it formed a round.
        wait_for("worker-2's new training process in a round", lambda: _training_pid(trainer, pods[2]) != before[pods[2]],
                 300, every=2, explain=lambda: _explain(trainer, LIVE_JOB))  # fmt: skip
        rejoined = time.time()
        wait_for("worker-2 back in a world of 3", lambda: _step_after(trainer, LIVE_JOB, rejoined, world=3),
                 300, every=2, explain=lambda: _explain(trainer, LIVE_JOB))  # fmt: skip
        assert {pod: _training_pid(trainer, pod) for pod in pods[:2]} == {
            pod: before[pod] for pod in pods[:2]
        }, _explain(trainer, LIVE_JOB)
        in_place = [
            c.get("restartCount", 0) for c in trainer.pod(pods[2])["status"].get("containerStatuses") or []
        ]
        assert in_place == [0], (
            in_place,
            _explain(trainer, LIVE_JOB),
        )  # not the container: the process alone

        # 2. kubectl scale 3 -> 2: worker-2 leaves, worker-0 and worker-1 go on in their processes.
        scaled_at = time.time()
        trainer.kubectl("scale", f"trainingjob/{LIVE_JOB}", "--replicas=2")
        step_at = wait_for(
            "a world of 2",
            lambda: _step_after(trainer, LIVE_JOB, scaled_at, world=2),
            300,
            every=2,
            explain=lambda: _explain(trainer, LIVE_JOB),
        )
        _report("live: scale 3 -> 2", scaled_at, step_at)
        assert {pod: _training_pid(trainer, pod) for pod in pods[:2]} == {
            pod: before[pod] for pod in pods[:2]
        }
        restarts = {
            p["metadata"]["name"]: sum(
                c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or []
            )
            for p in _workers(trainer, LIVE_JOB)
            if p["metadata"]["name"] in pods[:2]  # worker-2's pod may still be terminating
        }
        assert restarts == {pods[0]: 0, pods[1]: 0}, restarts
        kinds = [h["kind"] for h in _status(trainer, LIVE_JOB).get("history", [])]
        assert kinds.count("reformed") >= 2, kinds

        # 3. The store's pod deleted: the operator creates it again behind the same Service, empty; the two
        # workers train on in their processes through its absence (their clients connect again), no round ends.
        rounds = [h for h in _status(trainer, LIVE_JOB).get("history", []) if h["kind"] == "reformed"]
        store_pod = f"{LIVE_JOB}-rendezvous"
        old_store = trainer.pod(store_pod)["metadata"]["uid"]
        trainer.kubectl("delete", "pod", store_pod, "--wait=false")
        deleted_at = time.time()
        wait_for("the store's new pod running", lambda: _store_running(trainer, store_pod, old_store), 300, every=2,
                 explain=lambda: _explain(trainer, LIVE_JOB))  # fmt: skip
        back_at = time.time()
        wait_for("steps of 2 after the store came back", lambda: _step_after(trainer, LIVE_JOB, back_at + 5, world=2),
                 120, every=1, explain=lambda: _explain(trainer, LIVE_JOB))  # fmt: skip
        _report("live: the store's pod deleted (to the new store's first steps)", deleted_at, time.time())
        after = [h for h in _status(trainer, LIVE_JOB).get("history", []) if h["kind"] == "reformed"]
        assert after == rounds, _explain(trainer, LIVE_JOB)  # no round ended: the same processes train on
        restarted = [p["metadata"]["name"] for p in _workers(trainer, LIVE_JOB) if p["metadata"]["name"] in pods[:2]
                     and any(c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or [])]  # fmt: skip
        assert restarted == [], (restarted, _explain(trainer, LIVE_JOB))
    finally:
        trainer.kubectl("delete", "trainingjob", LIVE_JOB, "--wait=false")


FENCED_JOB = "fenced"


class Incarnations:
    """Which incarnations of the job's pods have processes on this machine, sampled every ``every`` s from
    /proc (the real nodes are namespaces of this machine: every container's processes are in its process
    table, each with its pod's name and generation in its environment, the agent's, torchrun's and the
    workers' alike). Per pod and generation: when first and last seen; and every sample that saw two
    generations of one pod at once."""

    def __init__(self, job: str, every: float = 0.25) -> None:
        self.job = job
        self.every = every
        self.seen: dict[tuple[str, int], list[float]] = {}
        self.overlaps: list[tuple[float, str, list[int]]] = []
        #: Samples that failed, and why.
        self.errors: list[str] = []
        #: Processes whose /proc entry blocked a read, and the one being read.
        self.skip: set[str] = set()
        self._reading = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="incarnations", daemon=True)

    def __enter__(self) -> Incarnations:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def now(self) -> dict[str, set[int]]:
        found: dict[str, set[int]] = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid in self.skip:
                continue
            self._reading = pid
            try:
                with open(f"/proc/{pid}/environ", "rb") as environ:
                    raw = environ.read()
            except OSError:
                continue
            if f"{contract.ENV_JOB_NAME}={self.job}\0".encode() not in raw + b"\0":
                continue
            env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
            pod = env.get(contract.ENV_POD_NAME.encode(), b"").decode()
            generation = env.get(contract.ENV_GENERATION.encode(), b"")
            if pod and generation.isdigit():
                found.setdefault(pod, set()).add(int(generation))
        return found

    def alive(self, pod: str, generation: int) -> bool:
        return generation in self.now().get(pod, set())

    def _read(self, at: float, found: dict[str, set[int]], done: threading.Event) -> None:
        try:
            found.update(self.now())
        except Exception as error:  # a sample lost is said, never the sampler: it must see to the end
            self.errors.append(f"{at:.1f}: {error!r}")
        finally:
            done.set()

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            at = time.time()
            found: dict[str, set[int]] = {}
            done = threading.Event()

            threading.Thread(
                target=self._read, args=(at, found, done), name="incarnations-read", daemon=True
            ).start()
            if not done.wait(5.0):  # a dying process's /proc entry can block a read: that pid is skipped
                self.errors.append(f"{at:.1f}: reading /proc/{self._reading}/environ blocked")
                self.skip.add(self._reading)
                continue
            for pod, generations in found.items():
                for generation in generations:
                    self.seen.setdefault((pod, generation), [at, at])[1] = at
                if len(generations) > 1:
                    self.overlaps.append((at, pod, sorted(generations)))


@pytest.mark.timeout(1500)
# Quarantined while it is made reliable (issue 49 asks for three passes in a row): in 5 runs the fencing held
# every time (the old workers ended by themselves with the kubelet stopped, before any replacement), but the
# test's own observations failed 3 times (a job's name, a pod object cleaned up, a container's log read from a
# node whose kubelet is stopped). A failure is reported (XFAIL), never hidden; a pass shows as XPASS.
def _launched(status: dict[str, Any], lost: dict[str, int]) -> dict[str, Any] | None:
    """The job's status once every lost pod's slot has a later incarnation launched, else None."""
    slots = {p["name"]: p for p in status.get("pods") or []}
    for pod, generation in lost.items():
        slot = slots.get(pod)
        if slot is None or slot["generation"] <= generation or slot.get("launchedAt") is None:
            return None
    return status


def test_a_node_cut_off_ends_its_old_workers_by_itself_and_never_two_of_a_rank_train_at_once(
    trainer: RealCluster,
) -> None:
    """Fencing (issue 49): a node's kubelet stops, its containers left running and its network up. The node
    goes NotReady; the operator deletes its pods at once (no kubelet confirms their end) and replaces them on
    the other node only the fencing seconds later (``FENCE_SECONDS``, as the test clusters' chart sets it). Meanwhile each old pod's agent,
    whose lease the operator now refuses (the pod deleted), ends its command's whole tree by itself, with the
    kubelet still stopped. Training goes on, and at no moment do two incarnations of one pod have processes."""
    job = _survivor()
    job["metadata"]["name"] = FENCED_JOB
    del job["spec"]["hang"]
    trainer.apply(job)
    cut: str | None = None
    try:
        wait_for("the job to train", lambda: _step_after(trainer, FENCED_JOB, 0.0, world=3), 480, every=2,
                 explain=lambda: _explain(trainer, FENCED_JOB))  # fmt: skip
        victim = f"{FENCED_JOB}-worker-1"
        cut = trainer.pod(victim)["spec"]["nodeName"]
        pods = _workers(trainer, FENCED_JOB)
        lost = {
            p["metadata"]["name"]: int(p["metadata"]["labels"]["trainguard.io/generation"])
            for p in pods
            if p["spec"]["nodeName"] == cut
        }
        with Incarnations(FENCED_JOB) as incarnations:
            assert all(incarnations.alive(pod, generation) for pod, generation in lost.items()), lost
            cut_at = time.time()
            trainer.stop_kubelet(cut)
            wait_for(f"{cut} to go NotReady", lambda: not trainer.node_ready(cut), 120)
            # The old workers end by themselves: nothing else could end them, the node's kubelet is stopped.
            wait_for(
                "the old incarnations' processes to end",
                lambda: not any(incarnations.alive(pod, generation) for pod, generation in lost.items()),
                180,
                every=0.5,
            )
            ended_at = time.time()
            print(f"\ncut off to the old workers' end: {ended_at - cut_at:.1f} s")
            assert not trainer.node_ready(cut)  # still cut off: they ended themselves

            step_at = _goes_on(
                trainer, f"a node cut off ({len(lost)} of 3 workers on it)", cut_at, FENCED_JOB
            )
            assert step_at > cut_at
            # The survivors train on at once; each replacement is launched once its fencing wait is over.
            status = wait_for(
                "the replacements launched",
                lambda: _launched(_status(trainer, FENCED_JOB), lost),
                FENCE_SECONDS + 120,
                every=1,
            )
            for pod, generation in lost.items():
                slot = next(p for p in status["pods"] if p["name"] == pod)
                assert slot["generation"] > generation
                fault = next(h for h in status["history"] if h["kind"] == "fault" and h["pod"] == pod)
                assert fault["fault"] == "NodeNotReady"
                assert fault["fencedUntil"] == pytest.approx(fault["at"] + FENCE_SECONDS, abs=1.0)
                # Read from the job's status and the processes seen, not from the pod objects: the job may
                # end (its pods cleaned up) by the time training has gone on with a world of 3.
                assert slot["node"] != cut, slot
                # The replacement was launched no sooner than fencedUntil, and after the old incarnation's last
                # process was seen (the status's launch time: /proc of the replacement's node was not always
                # read back in time here).
                launched = slot.get("launchedAt")
                assert launched is not None, slot
                assert launched >= fault["fencedUntil"] - 1.0, (pod, launched, fault)
                old = incarnations.seen[(pod, generation)]
                assert old[1] < launched, (pod, old, launched)
            assert incarnations.overlaps == []
        trainer.start_kubelet(cut)
        wait_for(f"{cut} to be Ready again", lambda: trainer.node_ready(cut), 120)
        cut = None
    finally:
        if cut is not None:
            trainer.start_kubelet(cut)
        trainer.kubectl("delete", "trainingjob", FENCED_JOB, "--wait=false")
