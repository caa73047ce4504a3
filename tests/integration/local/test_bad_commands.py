"""Bad commands get one clear message and exit status 2, and leave the running job exactly as it was."""

from __future__ import annotations

from typing import Any

import pytest

from .harness import LocalRuntime
from .jobs import cce_job

pytestmark = pytest.mark.integration


def _fingerprint(local: LocalRuntime, job: str) -> Any:
    view = local.view(job)
    pods = [(p["name"], p["generation"], p["restarts"], p["phase"]) for p in view["status"]["pods"]]
    processes = {name: [p.pid for p in procs] for name, procs in local.pod_processes().items()}
    return view["spec"], view["status"]["restartCounts"], view["status"]["replicas"], pods, processes


BAD_COMMANDS = [
    (["scale", "cce", "--role", "trainer", "--replicas", "7"], "replicas 7 outside [1, 5]"),
    (["scale", "cce", "--role", "trainer", "--replicas", "0"], "replicas 0 outside [1, 5]"),
    (["scale", "cce", "--role", "launcher", "--replicas", "2"], "replicas 2 outside [1, 1]"),
    (["scale", "cce", "--role", "chef", "--replicas", "2"], "has no role 'chef'"),
    (["scale", "nojob", "--role", "trainer", "--replicas", "2"], "no job 'nojob'"),
    (["get", "nojob"], "no job 'nojob'"),
    (["describe", "nojob"], "no job 'nojob'"),
    (["delete", "nojob"], "no job 'nojob'"),
    (["logs", "cce", "cce-trainer-7"], "no pod 'cce-trainer-7'"),
    (["chaos", "force-delete", "cce-trainer-7"], "no pod 'cce-trainer-7'"),
    (["chaos", "node-up", "rack-1"], "no node 'rack-1'"),
    (["apply", "missing.yaml"], "missing.yaml"),
    (["apply", "garbage.yaml"], "garbage.yaml"),
    (["apply", "invalid.yaml"], "invalid.yaml"),
    (["apply", "roles.yaml"], "roles of a submitted job cannot change"),
    (["apply", "toolarge.yaml"], "replicas 7 outside [1, 5]"),
]


def test_bad_commands_are_refused_and_change_nothing(local: LocalRuntime) -> None:
    """One running job, every bad command in turn: each gets one clear line and exit 2, the job stays as it was."""
    job = local.submit(cce_job())
    local.wait_running(job, 4)
    (local.workdir / "garbage.yaml").write_text("apiVersion: [unclosed\n  - : :\n\t")
    bad = cce_job()
    bad["spec"]["replicaSpecs"]["trainer"]["minReplicas"] = 9
    local.write_job(bad, "invalid.yaml")
    other_roles = cce_job()
    other_roles["spec"]["replicaSpecs"]["worker"] = other_roles["spec"]["replicaSpecs"].pop("trainer")
    local.write_job(other_roles, "roles.yaml")
    too_large = cce_job()
    too_large["spec"]["replicaSpecs"]["trainer"]["replicas"] = 7
    local.write_job(too_large, "toolarge.yaml")
    before = _fingerprint(local, job)

    for argv, words in BAD_COMMANDS:
        result = local.cli(*argv)
        assert result.code == 2, (argv, result.out, result.err)
        assert words in result.err, argv
        assert "Traceback" not in result.err
        assert len(result.err.strip().splitlines()) == 1, argv
        assert _fingerprint(local, job) == before, argv


def test_a_second_run_of_the_same_job_is_refused(local: LocalRuntime) -> None:
    spec = cce_job()
    local.submit(spec)
    result = local.cli("run", str(local.write_job(spec)), "--detach")
    assert result.code == 2
    assert "job 'cce' exists already" in result.err


def test_a_job_without_a_command_is_refused_with_the_field_to_fix(local: LocalRuntime) -> None:
    spec = cce_job()
    spec["spec"]["replicaSpecs"]["trainer"]["template"] = {
        "spec": {"containers": [{"name": "c", "image": "x"}]}
    }
    result = local.cli("run", str(local.write_job(spec)), "--detach")
    assert result.code == 2
    assert "spec.replicaSpecs.trainer.template.spec.containers[0].command" in result.err
