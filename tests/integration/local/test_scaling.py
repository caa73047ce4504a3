"""Scaling an elastic role up and down with ``scale`` and ``apply``; Horovod's host-discovery file follows."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from .harness import LocalRuntime
from .jobs import cce_job

pytestmark = pytest.mark.integration


def _trainers(view: dict[str, Any]) -> list[str]:
    return sorted(
        p["name"] for p in view["status"]["pods"] if p["role"] == "trainer" and p["phase"] == "Running"
    )


def _hosts(local: LocalRuntime, job: str) -> list[str]:
    script = local.home.discovery_script(job)
    if not script.exists():
        return []
    return subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout.split()


def _wait_hosts(local: LocalRuntime, job: str, hosts: list[str]) -> None:
    """The script is rewritten soon after the pods change (eventually consistent, like on a cluster)."""
    local.wait(job, lambda _: _hosts(local, job) == hosts, what=f"discovery lists {hosts}")


def test_scale_up_and_down_starts_and_stops_trainers(local: LocalRuntime) -> None:
    job = local.submit(cce_job())
    local.wait_running(job, 4)
    _wait_hosts(local, job, ["cce-trainer-0:1", "cce-trainer-1:1", "cce-trainer-2:1"])

    result = local.cli("scale", job, "--role", "trainer", "--replicas", "5")
    assert result.code == 0, result.err
    view = local.wait(job, lambda v: len(_trainers(v)) == 5, what="5 trainers")
    assert view["status"]["replicas"]["trainer"] == 5
    scale = [e for e in view["status"]["history"] if e["kind"] == "scale"][-1]
    assert scale["action"] == "scaleout"
    assert "cce-trainer-3" in scale["reason"]
    assert "cce-trainer-4" in scale["reason"]
    _wait_hosts(local, job, [f"cce-trainer-{i}:1" for i in range(5)])

    assert local.cli("scale", job, "--role", "trainer", "--replicas", "2").code == 0
    view = local.wait(job, lambda v: _trainers(v) == ["cce-trainer-0", "cce-trainer-1"], what="2 trainers")
    local.wait(
        job, lambda _: set(local.pod_processes()) == {"cce-launcher-0", "cce-trainer-0", "cce-trainer-1"}
    )
    _wait_hosts(local, job, ["cce-trainer-0:1", "cce-trainer-1:1"])
    assert view["status"]["restartCounts"] == {"launcher": 0, "trainer": 0}
    assert [c["type"] for c in view["status"]["conditions"]].count("Scaling") == 1


def test_apply_with_new_replicas_scales_the_running_job(local: LocalRuntime) -> None:
    spec = cce_job()
    job = local.submit(spec)
    local.wait_running(job, 4)
    spec["spec"]["replicaSpecs"]["trainer"]["replicas"] = 4
    result = local.cli("apply", str(local.write_job(spec)))
    assert result.code == 0, result.err
    assert "job cce configured" in result.out
    local.wait(job, lambda v: len(_trainers(v)) == 4, what="4 trainers")
    assert local.cli("apply", str(local.write_job(spec))).out.strip() == "job cce unchanged"


def test_discovery_script_path_is_given_to_pods(local: LocalRuntime) -> None:
    spec = cce_job(trainer=["/bin/sh", "-c", 'echo "discovery=$TRAINGUARD_DISCOVERY_SCRIPT"; sleep 600'])
    job = local.submit(spec)
    local.wait_running(job, 4)
    log = local.home.pod_log(job, "cce-trainer-0")
    local.wait(job, lambda _: "discovery=" in log.read_text(), what="the trainer printed its environment")
    assert f"discovery={local.home.discovery_script(job)}" in log.read_text()
