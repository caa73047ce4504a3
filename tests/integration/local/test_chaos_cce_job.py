"""Every chaos fault against a job shaped like CCE's AITrainingJob example, decided by its rules."""

from __future__ import annotations

from typing import Any

import pytest

from .harness import LocalRuntime
from .jobs import TICKING, cce_job, with_spec

pytestmark = pytest.mark.integration


def _restarted(view: dict[str, Any], pod: str, restarts: int) -> bool:
    match = [p for p in view["status"]["pods"] if p["name"] == pod]
    return bool(match) and match[0]["restarts"] == restarts and match[0]["phase"] == "Running"


def _hang_restarted(view: dict[str, Any], pod: str) -> bool:
    """Restarted in place once (a hang restart, no relaunch) and running again."""
    match = [p for p in view["status"]["pods"] if p["name"] == pod]
    return bool(match) and match[0]["hangRestarts"] == 1 and match[0]["phase"] == "Running"


def _last_fault(view: dict[str, Any]) -> dict[str, Any]:
    return [entry for entry in view["status"]["history"] if entry["kind"] == "fault"][-1]


@pytest.fixture
def cce(local: LocalRuntime) -> str:
    name = local.submit(cce_job())
    local.wait_running(name, 4)
    return name


def test_launcher_exit_129_restarts_the_launcher_by_its_exit_code_rule(local: LocalRuntime, cce: str) -> None:
    before = local.pod(cce, "cce-launcher-0")
    assert local.cli("chaos", "kill", "cce-launcher-0", "--exit-code", "129").code == 0
    view = local.wait(cce, lambda v: _restarted(v, "cce-launcher-0", 1), what="launcher restarted")
    fault = _last_fault(view)
    assert (fault["pod"], fault["exitCode"], fault["rule"], fault["action"]) == (
        "cce-launcher-0",
        129,
        "faultTolerantPolicy[0]",
        "restart",
    )
    assert fault["counted"] is True
    assert view["status"]["restartCounts"] == {"launcher": 1, "trainer": 0}
    after = local.pod(cce, "cce-launcher-0")
    assert after["generation"] == before["generation"] + 1


def test_launcher_exit_1_fails_the_job(local: LocalRuntime, cce: str) -> None:
    assert local.cli("chaos", "kill", "cce-launcher-0", "--exit-code", "1").code == 0
    view = local.wait_phase(cce, "Failed")
    assert _last_fault(view)["action"] == "fail-job"
    # cleanPodPolicy None: the trainers are left running.
    assert set(local.pod_processes()) == {"cce-trainer-0", "cce-trainer-1", "cce-trainer-2"}


def test_launcher_success_ends_the_job_while_trainers_still_run(local: LocalRuntime, cce: str) -> None:
    assert local.cli("chaos", "kill", "cce-launcher-0", "--exit-code", "0").code == 0
    view = local.wait_phase(cce, "Succeeded")
    trainers = [p for p in view["status"]["pods"] if p["role"] == "trainer"]
    assert [p["phase"] for p in trainers] == ["Running"] * 3


def test_a_trainer_killed_by_a_signal_restarts_in_its_place(local: LocalRuntime, cce: str) -> None:
    assert local.cli("chaos", "kill", "cce-trainer-1", "--signal", "SIGKILL").code == 0
    view = local.wait(cce, lambda v: _restarted(v, "cce-trainer-1", 1), what="trainer-1 restarted")
    fault = _last_fault(view)
    assert (fault["fault"], fault["exitCode"], fault["rule"]) == ("Exited", 137, "restartPolicy")
    assert view["status"]["restartCounts"]["trainer"] == 1


def test_node_down_replaces_its_trainer_on_another_node_and_node_up_returns_it(
    local: LocalRuntime, cce: str
) -> None:
    node = local.pod(cce, "cce-trainer-2")["node"]
    result = local.cli("chaos", "node-down", node)
    assert result.code == 0
    assert "cce-trainer-2" in result.out
    view = local.wait(cce, lambda v: _restarted(v, "cce-trainer-2", 1), what="trainer-2 replaced")
    assert local.pod(cce, "cce-trainer-2")["node"] != node
    fault = _last_fault(view)
    assert (fault["fault"], fault["rule"], fault["node"]) == ("NodeNotReady", "faultTolerantPolicy[0]", node)
    nodes = {n["name"]: n["ready"] for n in local.call("nodes")}
    assert nodes[node] is False
    assert local.cli("chaos", "node-up", node).code == 0
    assert {n["name"]: n["ready"] for n in local.call("nodes")}[node] is True


def test_a_force_deleted_trainer_is_replaced(local: LocalRuntime, cce: str) -> None:
    assert local.cli("chaos", "force-delete", "cce-trainer-0").code == 0
    view = local.wait(cce, lambda v: _restarted(v, "cce-trainer-0", 1), what="trainer-0 replaced")
    fault = _last_fault(view)
    assert (fault["fault"], fault["rule"], fault["counted"]) == (
        "PodForceDeleted",
        "faultTolerantPolicy[0]",
        True,
    )
    assert len(local.pod_processes()["cce-trainer-0"]) == 1


def test_an_evicted_trainer_is_replaced_without_counting(local: LocalRuntime, cce: str) -> None:
    assert local.cli("chaos", "evict", "cce-trainer-1").code == 0
    view = local.wait(cce, lambda v: _restarted(v, "cce-trainer-1", 1), what="trainer-1 replaced")
    fault = _last_fault(view)
    assert (fault["fault"], fault["counted"]) == ("PodEvicted", False)


def test_a_hung_trainer_is_restarted_in_place_by_its_agent(local: LocalRuntime) -> None:
    job = with_spec(cce_job("hung", trainer=TICKING), hang={"timeoutSeconds": 1.5, "gracePeriodSeconds": 1})
    # Only trainers print; a launcher that sleeps would look hung, so it prints too.
    job["spec"]["replicaSpecs"]["launcher"]["template"]["spec"]["containers"][0]["command"] = TICKING
    local.submit(job)
    view = local.wait_running("hung", 4)
    node = local.pod("hung", "hung-trainer-0")["node"]
    agents = {name: [p.pid for p in procs] for name, procs in local.pod_processes().items()}
    assert local.cli("chaos", "hang", "hung-trainer-0").code == 0
    view = local.wait(
        "hung",
        lambda v: any(e["kind"] == "fault" and e["fault"] == "Hang" for e in v["status"]["history"]),
        timeout=20,
        what="the hang recorded",
    )
    entry = next(e for e in view["status"]["history"] if e.get("fault") == "Hang")
    assert entry["action"] == "restart-in-place"
    assert entry["counted"] is False
    pod = local.wait("hung", lambda v: _hang_restarted(v, "hung-trainer-0"), what="running again in place")
    assert local.pod("hung", "hung-trainer-0")["node"] == node
    # The same agent (same pod incarnation) runs the command again: no relaunch.
    assert [p.pid for p in local.pod_processes()["hung-trainer-0"]] == agents["hung-trainer-0"]
    # Nothing rescheduled, so no restart (RESTARTS, restartCounts): a hang restart, shown on its own, and
    # not counted toward restartLimit either (entry["counted"] above).
    assert pod["status"]["restartCounts"] == {"launcher": 0, "trainer": 0}
    assert pod["status"]["hangRestartCounts"] == {"launcher": 0, "trainer": 1}
    assert local.pod("hung", "hung-trainer-0")["restarts"] == 0
    table = local.cli("get", "hung")
    assert table.code == 0, table.err
    header, *rows = (line.split() for line in table.out.splitlines()[1:])
    assert header[4:] == ["RESTARTS", "HANG-RESTARTS"]
    assert [row[4:] for row in rows if row[0] == "hung-trainer-0"] == [["0", "1"]]
    assert table.out.splitlines()[0].endswith("- hang restarts launcher=0 trainer=1")


def test_chaos_on_unknown_pods_and_nodes_is_a_clear_error(local: LocalRuntime, cce: str) -> None:
    for argv, words in (
        (["kill", "cce-trainer-9"], "no pod 'cce-trainer-9'"),
        (["hang", "nope"], "no pod 'nope'"),
        (["node-down", "node-99"], "no node 'node-99'"),
        (["kill", "cce-trainer-0", "--signal", "SIGNOPE"], "not a signal"),
        (["kill", "cce-trainer-0", "--exit-code", "300"], "exit codes are 0-255"),
    ):
        result = local.cli("chaos", *argv)
        assert result.code == 2, argv
        assert words in result.err
        assert "Traceback" not in result.err
    assert local.view(cce)["status"]["restartCounts"] == {"launcher": 0, "trainer": 0}
