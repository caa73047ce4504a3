"""Detection only on GPU jobs: a pod that requests GPUs, in a job whose hang handling is off, gets the agent's
report-only detection (ModelArts detects suspension on every GPU job); hang handling on is unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.controller.harness import Harness, worker_job
from trainguard.controller import EventType, JobPhase
from trainguard.controller.agent_options import agent_options, requests_gpus
from trainguard.controller.suspicion import SUSPECTED_HANG, SUSPICION_CLEARED


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", **c} for i, c in enumerate(containers)]}
    if init:
        spec["initContainers"] = [{"name": f"i{i}", **c} for i, c in enumerate(init)]
    return {"spec": spec}


GPU = {"nvidia.com/gpu": 1}
TEMPLATES = [
    ("no resources", pod({}), False),
    ("a GPU limit", pod({"resources": {"limits": GPU}}), True),
    ("a GPU request", pod({"resources": {"requests": {"nvidia.com/gpu": "2"}}}), True),
    ("zero GPUs", pod({"resources": {"limits": {"nvidia.com/gpu": 0}}}), False),
    ("zero GPUs as text", pod({"resources": {"limits": {"nvidia.com/gpu": "0"}}}), False),
    ("CPU and memory only", pod({"resources": {"limits": {"cpu": "4", "memory": "8Gi"}}}), False),
    ("another vendor's device", pod({"resources": {"limits": {"huawei.com/ascend-1980": 8}}}), False),
    ("the GPU in the second container", pod({}, {"resources": {"limits": GPU}}), True),
    ("the GPU in an init container", pod({}, init=({"resources": {"limits": GPU}},)), True),
    ("no spec", {}, False),
    ("resources not a map", pod({"resources": "lots"}), False),
]


@pytest.mark.parametrize(("template", "expected"), [t[1:] for t in TEMPLATES], ids=[t[0] for t in TEMPLATES])
def test_whether_a_pod_template_requests_gpus(template: dict[str, Any], expected: bool) -> None:
    assert requests_gpus(template) is expected


GPU_TEMPLATE = pod({"image": "train", "resources": {"limits": GPU}})
CPU_TEMPLATE = pod({"image": "train"})
DETECT_ONLY = ["--signals", "io,cpu", "--report-only"]

DECISIONS = [
    (
        "GPU, hang handling off: detect only, 1800 s",
        GPU_TEMPLATE,
        None,
        ["--hang-timeout", "1800", *DETECT_ONLY],
    ),
    (
        "GPU, a timeout alone (the annotation's)",
        GPU_TEMPLATE,
        {"enabled": False, "timeoutSeconds": 600},
        ["--hang-timeout", "600", *DETECT_ONLY],
    ),
    (
        "GPU, hang handling on: restart upon suspension",
        GPU_TEMPLATE,
        {"enabled": True, "timeoutSeconds": 60},
        ["--hang-timeout", "60", "--max-consecutive", "3", "--signals", "heartbeat,log,cpu"],
    ),
    ("no GPU, hang handling off: nothing", CPU_TEMPLATE, None, []),
]


@pytest.mark.parametrize(
    ("template", "hang", "expected"), [d[1:] for d in DECISIONS], ids=[d[0] for d in DECISIONS]
)
def test_the_agents_detection_for_a_pod(
    template: dict[str, Any], hang: dict[str, Any] | None, expected: list[str]
) -> None:
    job = worker_job(job={"hang": hang} if hang else {}, template=template)
    options = agent_options(job, "worker")
    grace_at = options.index("--grace")
    assert options[:grace_at] == expected
    assert ("--report-only" in options) is (expected[-1:] == ["--report-only"])


POD = "test-horovod-elastic-trainer-1"


def _events(h: Harness, reason: str) -> list[tuple[str | None, str]]:
    return [(e.pod, e.message) for e in h.cluster.events() if e.reason == reason]


def test_a_suspected_hang_is_shown_once_in_status_and_event_never_restarted_and_clears() -> None:
    h = Harness.start()
    h.running()
    launches = len(h.cluster.launches())
    h.cluster.suspect_hang(POD, "io", 1800.0)
    for _ in range(5):
        h.tick()
    ((pod, message),) = _events(h, SUSPECTED_HANG)
    assert pod == POD
    assert "may be suspended" in message
    assert all(e.type is EventType.WARNING for e in h.cluster.events() if e.reason == SUSPECTED_HANG)
    slot = h.pod(POD)
    assert slot.suspected_hang is not None
    assert (slot.suspected_hang.signal, slot.suspected_hang.idle_seconds) == ("io", 1800.0)
    assert (slot.restarts, slot.hang_restarts, slot.generation) == (0, 0, 1)  # nothing done, nothing counted
    assert len(h.cluster.launches()) == launches
    assert h.status.phase is JobPhase.RUNNING
    assert not [e for e in h.status.history if e.pod == POD]
    h.cluster.suspect_hang(POD, None)
    h.tick()
    assert h.pod(POD).suspected_hang is None
    assert [p for p, _ in _events(h, SUSPICION_CLEARED)] == [POD]
    h.cluster.suspect_hang(POD, "cpu", 1800.0)  # a second episode: a second event
    h.tick()
    assert len(_events(h, SUSPECTED_HANG)) == 2


def test_the_page_and_describe_say_the_job_may_be_suspended() -> None:
    from trainguard.ui.pages import suspended_lines

    h = Harness.start()
    h.running()
    status = h.status.model_dump(by_alias=True, mode="json")
    assert suspended_lines(status) == []
    h.cluster.suspect_hang(POD, "io", 1800.0)
    h.tick()
    status = h.status.model_dump(by_alias=True, mode="json")
    (line,) = suspended_lines(status)
    assert line.startswith(f"the job may be suspended: pod {POD} made no progress (io) for 1800 s")
