"""Always / Never / ExitCode with real processes: what happens when a pod's command exits."""

from __future__ import annotations

import pytest

from .harness import LocalRuntime
from .jobs import SLEEPING, simple_job

pytestmark = pytest.mark.integration


def _runs(count_file: str) -> list[str]:
    """A command that counts its runs in a file and exits 0."""
    return ["/bin/sh", "-c", f"echo run >> {count_file}"]


def test_always_runs_a_pod_again_even_after_success(local: LocalRuntime) -> None:
    runs = local.workdir / "runs.txt"
    local.submit(simple_job("always", _runs(str(runs)), restartPolicy="Always"))
    view = local.wait(
        "always",
        lambda _: runs.exists() and len(runs.read_text().splitlines()) >= 3,
        timeout=30,
        what="three runs",
    )
    assert view["status"]["restartCounts"]["worker"] >= 2
    assert view["status"]["phase"] not in ("Succeeded", "Failed")
    assert all(e["action"] == "restart" for e in view["status"]["history"] if e["kind"] == "fault")


def test_never_fails_the_job_on_the_first_failure(local: LocalRuntime) -> None:
    local.submit(simple_job("never", ["/bin/sh", "-c", "exit 137"], restartPolicy="Never"))
    view = local.wait_phase("never", "Failed")
    assert view["status"]["restartCounts"] == {"worker": 0}
    assert view["status"]["pods"][0]["exitCode"] == 137


def test_exit_code_retries_a_signal_and_fails_on_a_program_error(local: LocalRuntime) -> None:
    local.submit(simple_job("exitcode", SLEEPING, replicas=2, restartPolicy="ExitCode"))
    local.wait_running("exitcode", 2)
    assert local.cli("chaos", "kill", "exitcode-worker-0", "--signal", "KILL").code == 0
    view = local.wait(
        "exitcode",
        lambda v: v["status"]["restartCounts"]["worker"] == 1 and v["status"]["phase"] == "Running",
        what="worker-0 restarted after exit 137",
    )
    assert view["status"]["history"][-1]["exitCode"] == 137
    assert local.cli("chaos", "kill", "exitcode-worker-1", "--exit-code", "1").code == 0
    view = local.wait_phase("exitcode", "Failed")
    assert view["status"]["history"][-1]["exitCode"] == 1
    assert view["status"]["restartCounts"] == {"worker": 1}


def test_a_restart_limit_is_enforced_across_real_restarts(local: LocalRuntime) -> None:
    job = simple_job(
        "limited", ["/bin/sh", "-c", "sleep 0.3; exit 2"], restartPolicy="OnFailure", restartLimit=2
    )
    local.submit(job)
    view = local.wait_phase("limited", "Failed", timeout=40)
    assert view["status"]["restartCounts"] == {"worker": 2}
    assert len(local.view("limited")["status"]["history"]) == 3
