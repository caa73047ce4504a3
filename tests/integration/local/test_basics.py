"""run -> pods -> exit -> status: the core path of the local runtime, through the CLI."""

from __future__ import annotations

import json
import stat
import time

import pytest

from .harness import LocalRuntime
from .jobs import cce_job, simple_job

pytestmark = pytest.mark.integration

_PRINT_ENV = (
    "import os; print(' '.join(f'{k}={os.environ.get(k)}' for k in ("
    "'TRAININGJOB_NAME', 'TRAININGJOB_NAMESPACE', 'TRAININGJOB_REPLICA_NAME', 'TRAININGJOB_REPLICA_INDEX',"
    "'TRAININGJOB_REPLICA_RESTARTCOUNT', 'TRAINGUARD_RDZV_ENDPOINT', 'MASTER_ADDR', 'MASTER_PORT', 'WORLD_SIZE',"
    "'RANK', 'GREETING')))"
)


def test_a_job_that_succeeds_runs_to_the_end_and_exits_0(local: LocalRuntime) -> None:
    job = simple_job("hello", ["python", "-c", _PRINT_ENV], replicas=2)
    job["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "GREETING", "value": "hi-$(TRAININGJOB_NAME)"}
    ]
    result = local.cli_process("run", str(local.write_job(job)))
    assert result.code == 0, result.err
    assert "job hello Succeeded" in result.out

    view = local.view("hello")
    status = view["status"]
    assert status["phase"] == "Succeeded"
    assert [(p["name"], p["role"], p["index"], p["phase"]) for p in status["pods"]] == [
        ("hello-worker-0", "worker", 0, "Succeeded"),
        ("hello-worker-1", "worker", 1, "Succeeded"),
    ]
    assert status["restartCounts"] == {"worker": 0}
    assert [c["type"] for c in status["conditions"] if c["status"] == "True"] == ["Succeeded"]

    log = (local.home.logs_dir / "hello" / "hello-worker-1.log").read_text()
    assert "TRAININGJOB_NAME=hello TRAININGJOB_NAMESPACE=default TRAININGJOB_REPLICA_NAME=worker" in log
    assert "TRAININGJOB_REPLICA_INDEX=1 TRAININGJOB_REPLICA_RESTARTCOUNT=0" in log
    port = log.split("MASTER_PORT=")[1].split()[0]
    assert f"TRAINGUARD_RDZV_ENDPOINT=127.0.0.1:{port} MASTER_ADDR=127.0.0.1" in log
    assert "WORLD_SIZE=2 RANK=1 GREETING=hi-hello" in log


def test_a_failing_job_exits_1_and_get_json_says_why(local: LocalRuntime) -> None:
    job = simple_job("broken", ["/bin/sh", "-c", "exit 3"], restartPolicy="Never")
    result = local.cli_process("run", str(local.write_job(job)))
    assert result.code == 1
    assert "job broken Failed" in result.out

    got = local.cli_process("get", "broken", "-o", "json")
    status = json.loads(got.out)["status"]
    assert status["phase"] == "Failed"
    assert status["pods"][0]["exitCode"] == 3
    assert status["history"][0]["exitCode"] == 3
    assert status["history"][0]["action"] == "fail-job"
    for key in ("conditions", "restartCounts", "replicas", "pods", "history"):
        assert key in status


def test_get_describe_logs_and_events_show_a_running_job(local: LocalRuntime) -> None:
    job = simple_job("chatty", ["/bin/sh", "-c", "echo started; sleep 600"], replicas=2)
    job["spec"]["replicaSpecs"]["worker"]["template"]["spec"]["containers"][0]["image"] = "pytorch:latest"
    local.submit(job)
    local.wait_running("chatty", 2)
    local.wait(
        "chatty",
        lambda _: all("started" in p.read_text() for p in (local.home.logs_dir / "chatty").glob("*.log")),
        what="both pods logged",
    )

    table = local.cli("get")
    assert table.code == 0
    assert "chatty" in table.out
    assert "Running" in table.out
    wide = local.cli("get", "chatty", "-o", "wide")
    assert "chatty-worker-0" in wide.out
    assert "node-" in wide.out
    described = local.cli("describe", "chatty")
    assert "images are ignored" in described.out
    assert "Conditions:" in described.out
    assert "Fault-recovery history:" in described.out
    logs = local.cli_process("logs", "chatty")
    assert "[chatty-worker-0] started" in logs.out
    assert "[chatty-worker-1] started" in logs.out
    one = local.cli_process("logs", "chatty", "chatty-worker-1")
    assert one.out.strip() == "started"
    events = local.cli("events", "chatty")
    assert "Started" in events.out
    assert "chatty-worker-1" in events.out


def test_the_home_and_the_socket_are_the_owners_only(local: LocalRuntime) -> None:
    local.submit(simple_job("private", ["/bin/sh", "-c", "sleep 600"]))
    assert stat.S_IMODE(local.home.root.stat().st_mode) == 0o700
    assert stat.S_IMODE(local.home.socket.stat().st_mode) == 0o600
    assert stat.S_ISSOCK(local.home.socket.stat().st_mode)


def test_only_one_control_plane_runs_however_many_commands_start_one(local: LocalRuntime) -> None:
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: local.cli_process("get"), range(4)))
    assert all(r.code == 0 for r in results), [r.err for r in results]
    daemons = local.own_commands("trainguard.backends.local.daemon")
    assert len(daemons) == 1


def test_delete_stops_the_pods_and_forgets_the_job(local: LocalRuntime) -> None:
    local.submit(simple_job("doomed", ["/bin/sh", "-c", "sleep 600"], replicas=2))
    local.wait_running("doomed", 2)
    assert set(local.pod_processes()) == {"doomed-worker-0", "doomed-worker-1"}
    result = local.cli("delete", "doomed")
    assert result.code == 0, result.err
    assert local.pod_processes() == {}
    assert local.cli("get", "doomed").code == 2
    assert not (local.home.logs_dir / "doomed").exists()


def test_run_exits_1_when_the_job_times_out(local: LocalRuntime) -> None:
    job = simple_job("slow", ["/bin/sh", "-c", "sleep 600"])
    job["spec"]["timeLimit"] = 2
    result = local.cli_process("run", str(local.write_job(job)))
    assert result.code == 1
    assert "job slow Timeout" in result.out
    # cleanPodPolicy Running: the pod is stopped (right after the phase is stored).
    local.wait("slow", lambda _: local.pod_processes() == {}, what="the pod stopped")


def test_logs_follow_prints_until_the_job_ends(local: LocalRuntime) -> None:
    job = simple_job("counting", ["/bin/sh", "-c", "for i in 1 2 3; do echo line $i; sleep 0.3; done"])
    local.submit(job)
    result = local.cli_process("logs", "counting", "counting-worker-0", "-f")
    assert result.code == 0
    assert result.out.split() == ["line", "1", "line", "2", "line", "3"]


def test_a_finished_job_is_removed_after_its_ttl(local: LocalRuntime) -> None:
    job = simple_job("brief", ["/bin/sh", "-c", "true"])
    job["spec"]["ttlSecondsAfterFinished"] = 1
    local.submit(job)
    local.wait_phase("brief", "Succeeded")
    deadline = time.monotonic() + 20
    while local.call("exists", job="brief"):
        assert time.monotonic() < deadline, "the job outlived its ttlSecondsAfterFinished"
        time.sleep(0.1)
    assert not (local.home.logs_dir / "brief").exists()


def test_run_nodes_packs_pods_onto_fewer_nodes_with_more_slots(local: LocalRuntime) -> None:
    job = local.submit(cce_job(), "--nodes", "2")
    view = local.wait_running(job, 4)
    assert {p["node"] for p in view["status"]["pods"]} == {"node-0", "node-1"}
    assert local.call("nodes") == [
        {"name": "node-0", "slots": 3, "ready": True, "isolated": "", "injected": []},
        {"name": "node-1", "slots": 3, "ready": True, "isolated": "", "injected": []},
    ]
