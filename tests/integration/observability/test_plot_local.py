"""``trainguard plot JOB`` on the local runtime: a job killed, hung and scaled gets a timeline with those
events and their recovery times, drawn into a valid PNG."""

from __future__ import annotations

import json
from typing import Any

import pytest
from local.harness import LocalRuntime
from local.jobs import TICKING, simple_job, with_spec

pytestmark = pytest.mark.integration


def recovered(view: dict[str, Any], fault: str) -> bool:
    entries = [e for e in view["status"]["history"] if e.get("fault") == fault]
    return bool(entries) and all(e["recoverySeconds"] is not None for e in entries)


def test_a_killed_hung_and_scaled_job_gets_its_timeline(local: LocalRuntime) -> None:
    spec = simple_job("night", TICKING, replicas=2, minReplicas=1, maxReplicas=3, restartPolicy="OnFailure")
    job = local.submit(with_spec(spec, hang={"timeoutSeconds": 1.5}))
    local.wait_running(job, 2)
    assert local.cli("chaos", "kill", "night-worker-0").code == 0
    local.wait(job, lambda v: recovered(v, "Exited"), what="the kill recovered from")
    assert local.cli("chaos", "hang", "night-worker-1").code == 0
    local.wait(job, lambda v: recovered(v, "Hang"), timeout=30, what="the hang recovered from")
    assert local.cli("scale", job, "--role", "worker", "--replicas", "3", "--wait").code == 0

    picture, data = local.workdir / "timeline.png", local.workdir / "timeline.json"
    result = local.cli("plot", job, "-o", str(picture), "--data", str(data))
    assert result.code == 0, result.err
    assert result.out.startswith(f"wrote {picture} (3 pods, 2 faults, 1 scaling step, ")

    history = local.view(job)["status"]["history"]
    plotted = json.loads(data.read_text())
    faults = {f["fault"]: f for f in plotted["faults"]}
    assert (faults["Exited"]["pod"], faults["Exited"]["restart"]) == ("night-worker-0", "new pod")
    assert (faults["Hang"]["pod"], faults["Hang"]["restart"]) == ("night-worker-1", "in place")
    for entry in (e for e in history if e["kind"] == "fault"):
        assert faults[entry["fault"]]["recovery_seconds"] == entry["recoverySeconds"] > 0
        assert faults[entry["fault"]]["at"] == entry["at"]
    (step,) = plotted["scale_steps"]
    assert (step["role"], step["operation"], step["replicas"], step["pods"]) == (
        "worker",
        "scaleout",
        3,
        ["night-worker-2"],
    )

    lanes = {lane["pod"]: [s["state"] for s in lane["segments"]] for lane in plotted["lanes"]}
    assert lanes["night-worker-0"][-3:] == ["running", "failed", "running"]
    assert lanes["night-worker-1"][-3:] == ["running", "hung", "running"]
    assert lanes["night-worker-2"][-1] == "running"
    assert plotted["lanes"][2]["segments"][0]["start"] == step["at"]

    png = picture.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png[12:16] == b"IHDR"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1200, 340)  # 12 x (1.6 + 0.45 x 4 rows) inches at 100 dpi
    assert 10_000 < len(png) < 1_000_000
