"""The local runtime's pure parts, without processes: environment, placement, agent reports, discovery."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path

import pytest

from trainguard.api import TrainingJob
from trainguard.backends.local import discovery
from trainguard.backends.local.home import Home
from trainguard.backends.local.placement import choose_node
from trainguard.backends.local.podenv import argv_and_cwd, expand, network, pod_environment
from trainguard.backends.local.records import JobRecord, NodeRecord, PodRecord, PodState
from trainguard.backends.local.rendezvous import JobPods
from trainguard.backends.local.reports import parse
from trainguard.backends.local.runtime import START_ERROR_EXIT, Runtime
from trainguard.backends.local.store import Store
from trainguard.controller.launchspec import LaunchSpec, launch_spec
from trainguard.controller.reports import AgentReport, WorkerRestart

from .jobs import cce_job, simple_job


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("--name=$(TRAININGJOB_NAME)", "--name=cce"),
        ("$(UNDEFINED) stays", "$(UNDEFINED) stays"),
        ("$$(TRAININGJOB_NAME) is escaped", "$(TRAININGJOB_NAME) is escaped"),
        ("$HOME is not ours", "$HOME is not ours"),
    ],
)
def test_kubernetes_variable_expansion(text: str, expanded: str) -> None:
    assert expand(text, {"TRAININGJOB_NAME": "cce"}) == expanded


def _spec(
    job: TrainingJob, role: str, index: int, sizes: dict[str, int], port: int, restarts: int = 0
) -> LaunchSpec:
    return launch_spec(job, role, index, 1, restarts, sizes, network(port))


def test_a_trainer_gets_the_operators_environment_and_its_rank_after_the_launcher() -> None:
    job = TrainingJob.model_validate(cce_job())
    job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"uid": "uid-1"})})
    spec = _spec(job, "trainer", 2, {"launcher": 1, "trainer": 3}, port=41000, restarts=4)
    env = pod_environment(job, "trainer", spec, {"PATH": "/bin", "TRAININGJOB_NAME": "stale"})
    assert env["PATH"] == "/bin"
    assert (env["TRAININGJOB_NAME"], env["TRAININGJOB_REPLICA_NAME"], env["TRAININGJOB_REPLICA_INDEX"]) == (
        "cce",
        "trainer",
        "2",
    )
    assert env["TRAININGJOB_REPLICA_RESTARTCOUNT"] == "4"
    assert env["TRAINGUARD_RDZV_ENDPOINT"] == "127.0.0.1:41000"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["WORLD_SIZE"], env["RANK"]) == (
        "127.0.0.1",
        "41000",
        "4",
        "3",
    )
    assert "PET_RDZV_ENDPOINT" not in env  # a Horovod job: no torchrun settings


def test_a_pytorch_worker_that_starts_torchrun_itself_gets_torchruns_elastic_defaults() -> None:
    for command, defaults in ((["sh", "-c", "torchrun train.py"], True), (["torchrun", "train.py"], False)):
        spec = simple_job("elastic", command, replicas=2, minReplicas=1, maxReplicas=4)
        spec["spec"]["frameworkType"] = "pytorch"
        spec["metadata"]["uid"] = "uid-9"
        job = TrainingJob.model_validate(spec)
        env = pod_environment(job, "worker", _spec(job, "worker", 0, {"worker": 2}, port=42000), {})
        if not defaults:  # trainguard writes that command, flags and all: no defaults are needed
            assert not any(name.startswith("PET_") for name in env), env
            continue
        assert env["PET_RDZV_ENDPOINT"] == "127.0.0.1:42000"
        assert (env["PET_RDZV_BACKEND"], env["PET_RDZV_ID"], env["PET_NNODES"]) == ("c10d", "uid-9", "1:4")


def test_a_pod_gets_one_openmp_thread_unless_its_container_or_the_control_plane_says_otherwise() -> None:
    spec = simple_job("threads", ["python", "train.py"], replicas=2)
    spec["metadata"]["uid"] = "uid-3"
    job = TrainingJob.model_validate(spec)
    launch = _spec(job, "worker", 0, {"worker": 2}, port=43000)
    assert pod_environment(job, "worker", launch, {})["OMP_NUM_THREADS"] == "1"
    assert pod_environment(job, "worker", launch, {"OMP_NUM_THREADS": "4"})["OMP_NUM_THREADS"] == "4"
    spec["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "OMP_NUM_THREADS", "value": "8"}
    ]
    job = TrainingJob.model_validate(spec)
    assert pod_environment(job, "worker", launch, {"OMP_NUM_THREADS": "4"})["OMP_NUM_THREADS"] == "8"


def test_command_and_working_dir_come_from_the_container(tmp_path: Path) -> None:
    spec = simple_job("wd", ["python", "-c", "print('$(TRAININGJOB_REPLICA_INDEX)')"])
    spec["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["containers"][0]["workingDir"] = "sub"
    job = TrainingJob.model_validate(spec)
    launch = _spec(job, "worker", 0, {"worker": 1}, port=1)
    argv, cwd = argv_and_cwd(job, "worker", launch, pod_environment(job, "worker", launch, {}), str(tmp_path))
    assert argv == ["python", "-c", "print('0')"]
    assert cwd == tmp_path / "sub"


def _pod(name: str, node: str, state: PodState = PodState.RUNNING) -> PodRecord:
    return PodRecord(name, "j", "worker", 0, node, state)


def test_placement_spreads_and_avoids_and_waits_when_full() -> None:
    nodes = [NodeRecord("node-0", 2), NodeRecord("node-1", 2), NodeRecord("node-2", 1, ready=False)]
    assert choose_node(nodes, []) == "node-0"
    assert choose_node(nodes, [_pod("a", "node-0")]) == "node-1"
    assert choose_node(nodes, [_pod("a", "node-0")], avoid=["node-1"]) == "node-0"
    full = [_pod("a", "node-0"), _pod("b", "node-0"), _pod("c", "node-1"), _pod("d", "node-1")]
    assert choose_node(nodes, full) is None  # node-2 is NotReady
    # A pod that ended frees its slot.
    assert choose_node(nodes, [*full[:3], _pod("d", "node-1", PodState.EXITED)]) == "node-1"


def test_agent_reports_fold_into_exit_hangs_and_progress(tmp_path: Path) -> None:
    lines = [
        {"event": "started", "time": 10.0, "pid": 100, "attempt": 1},
        {"event": "progress", "time": 11.0, "pid": 100, "attempt": 1},
        {"event": "hang", "time": 15.0, "pid": 100, "attempt": 1, "signal": "log"},
        {"event": "restart-in-place", "time": 15.1, "pid": 100, "attempt": 1},
        {"event": "started", "time": 15.2, "pid": 101, "attempt": 2},
        {
            "event": "exited",
            "time": 20.0,
            "pid": 101,
            "attempt": 2,
            "exit_code": 137,
            "signal": "SIGKILL",
            "oom": True,
        },
    ]
    path = tmp_path / "report.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + '\n{"event": "trunc')
    report = parse(path)
    summary = report.summary  # as the agent folds it (``trainguard.pod.summary``)
    assert (report.started_at, report.child_pid, summary["lastProgressAt"]) == (10.0, 101, 11.0)
    assert (summary["hangs"], summary["inPlaceRestarts"], summary["attempt"]) == (1, 1, 2)
    assert (report.exited, report.exit_code, report.signal, report.reason) == (True, 137, 9, "OOMKilled")


def test_worker_restarts_fold_into_the_summary_the_controller_reads(tmp_path: Path) -> None:
    failure = {"rank": 2, "local_rank": 0, "pid": 300, "exit_code": 137, "signal": "SIGKILL"}
    lines = [
        {"event": "started", "time": 10.0, "pid": 100, "attempt": 1},
        {"event": "workers-restarted", "time": 12.5, "pid": 100, "attempt": 1, "failed_at": 12.0,
         "failures": [failure, {**failure, "rank": 3, "local_rank": 1, "pid": 301, "exit_code": 1}],
         "restarts_left": 2, "max_restarts": 3},
        {"event": "workers-restarted", "time": 13.0, "pid": 100, "attempt": 1, "failures": [{"rank": 0}]},
    ]  # fmt: skip
    path = tmp_path / "report.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    agent = AgentReport.from_summary(parse(path).summary, answered=0)
    # The one without an exit code is no restart.
    assert agent.worker_restarts == (
        WorkerRestart(12.0, 137, rank=2, failed=2, restarts_left=2, max_restarts=3),
    )


def test_discovery_is_replaced_atomically_and_never_by_an_older_version(tmp_path: Path) -> None:
    script = tmp_path / "discover_hosts.sh"
    assert discovery.write(script, 2, ["job-trainer-0:1", "job-trainer-1:1"])
    assert not discovery.write(script, 1, ["stale:1"])
    assert discovery.current_version(script) == 2
    assert "echo job-trainer-1:1" in script.read_text()
    assert script.stat().st_mode & 0o100


def test_the_rendezvous_store_says_when_it_cannot_read_the_state_and_keeps_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A busy or vanishing state file: no early completion of the round and no exit, with a warning."""
    pods = JobPods(Home(tmp_path / "home").ensure(), "job-a", {"worker"})

    def busy(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(pods.store, "list_pods", busy)
    monkeypatch.setattr(pods.store, "get_job", busy)
    with caplog.at_level(logging.WARNING, logger="trainguard.local"):
        assert pods.running() is None
        assert pods.orphaned(now=0.0) is False
    assert [r.getMessage() for r in caplog.records] == [
        "job job-a: could not list its pods (database is locked); the round completes by its own timeout",
        "job job-a: could not read the job's state (database is locked); the store keeps serving",
    ]


def test_a_launch_queued_without_a_launch_spec_fails_to_start_and_says_why(tmp_path: Path) -> None:
    """A pod row written by a trainguard older than launch specs: no crash of the loop, a StartError."""
    home = Home(tmp_path / "home").ensure()
    store = Store(home.state_db)
    spec = simple_job("old", ["python", "-c", "pass"])
    job = TrainingJob.model_validate(spec)
    record = store.insert_job(JobRecord("old", "uid-old", spec, 1, {}, 1, 0.0, 41000, workdir=str(tmp_path)))
    store.add_nodes([NodeRecord("node-0", 1)])
    store.insert_pod(PodRecord("old-worker-0", "old", "worker", 0, "", PodState.PENDING))
    runtime = Runtime(home, store, time.time, base_env={})
    runtime.place_pending(record, job)
    row = store.get_pod("old-worker-0")
    assert row is not None
    assert (row.state, row.reason, row.exit_code) == (PodState.EXITED, "StartError", START_ERROR_EXIT)
    (event,) = [e for e in store.list_events("old") if e.reason == "FailedStart"]
    assert "no launch spec" in event.message
