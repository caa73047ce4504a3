"""The fault tolerance check on the local runtime, with example 1 (real PyTorch under torchrun): a hardware fault
injected on a worker's node moves that worker to another node within 60 s, isolates the node (the history, the
page and ``trainguard node list`` say so) and the job succeeds; a later job never uses that node; a node
faulty before a job starts never runs its training command."""

from __future__ import annotations

import time
from typing import Any

import pytest
from torch_harness import START_TIMEOUT, brief, wait_step

from trainguard.api.load import load_object
from trainguard.demo.session import Session, digits_job
from trainguard.ui.pages import job_detail

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

#: The issue's bound: the faulty node's worker runs elsewhere within this long of the fault.
MOVED_WITHIN = 60.0


def _checked_job(name: str, session: Session, **spec: Any) -> dict[str, Any]:
    job = digits_job(name, session.root, step_delay=0.05, **spec)
    # Periodic checks every 2 s (the default 300 s is for real jobs); up to half the nodes may be isolated.
    job["spec"]["faultCheck"] = {"periodSeconds": 2, "maxIsolatedShare": 0.5}
    return job


def _isolated(session: Session) -> dict[str, str]:
    return {node["name"]: node["isolated"] for node in session.call("nodes") if node["isolated"]}


def _entries(session: Session, job: str, kind: str) -> list[dict[str, Any]]:
    return [entry for entry in session.view(job)["status"]["history"] if entry["kind"] == kind]


def test_a_hardware_fault_moves_its_worker_isolates_the_node_and_the_job_succeeds(session: Session) -> None:
    job = session.submit(_checked_job("digits-fc", session, epochs=6))  # a node per pod, and a spare
    wait_step(session, job, 5)
    worker = f"{job}-worker-1"
    node = session.pods(job)[worker]["node"]
    faulted = time.monotonic()
    session.chaos("hardware-fault", node, item="gpu.ecc")

    def moved() -> bool:
        pod = session.pods(job)[worker]
        return pod["phase"] == "Running" and pod["node"] != node

    session.wait(f"{worker} running off {node}", moved, MOVED_WITHIN + 60)
    took = time.monotonic() - faulted
    assert took <= MOVED_WITHIN, f"{worker} ran again elsewhere {took:.0f} s after the fault"

    assert node in _isolated(session)
    assert job in _isolated(session)[node]  # the reason names the job and the pod
    (fault,) = [e for e in _entries(session, job, "fault") if e["pod"] == worker]
    assert (fault["fault"], fault["rule"], fault["counted"]) == ("HardwareFault", "faultCheck", False)
    assert fault["check"]["scenario"] == 3
    assert fault["check"]["node"] == node
    assert [item["name"] for item in fault["check"]["failed"]] == ["gpu.ecc"]
    (isolation,) = _entries(session, job, "isolate")
    assert (isolation["node"], isolation["action"]) == (node, "isolate")
    # The job's page says so.
    view = session.view(job)
    page = job_detail(load_object(view, "digits-fc").job, view, [])
    assert page["fault_check"]["isolated"] == [node]
    assert f"node {node} isolated" in [entry["label"] for entry in page["history"]]

    ended = session.wait(
        f"{job} to end", lambda: session.phase(job) in ("Succeeded", "Failed"), START_TIMEOUT * 3
    )
    assert ended
    assert session.phase(job) == "Succeeded", brief(session, job)

    # A later job, as big as the nodes left: none of its pods lands on the isolated node.
    later = session.submit(_checked_job("digits-later", session, epochs=1, replicas=3))
    wait_step(session, later, 1)
    assert node not in {pod["node"] for pod in session.pods(later).values()}


def test_a_node_faulty_before_a_job_starts_never_runs_its_training_command(session: Session) -> None:
    # Pods spread over the Ready nodes, the emptiest first, then by name: the job's first pod goes to node-0,
    # which the local runtime makes when the job comes; its fault is injected ahead.
    session.chaos("hardware-fault", "node-0", item="gpu.retired")
    job = session.submit(_checked_job("digits-pre", session, epochs=2, replicas=2))
    wait_step(session, job, 3)
    pre = [e for e in _entries(session, job, "fault") if e["fault"] == "HardwareFault"]
    assert pre, brief(session, job)
    (fault,) = pre
    assert (fault["node"], fault["check"]["phase"], fault["check"]["scenario"]) == ("node-0", "pre", 1)
    assert "node-0" in _isolated(session)
    assert all(pod["node"] != "node-0" for pod in session.pods(job).values())
    # The pod's first incarnation ran on node-1 and never started the training command: its log has the
    # agent's words about the pre-check before any line of the script's.
    log = session.home.pod_log(job, fault["pod"]).read_text(errors="replace")
    first_script_line = log.find("[digits]")
    check_line = log.find("pre-check")
    assert 0 <= check_line < first_script_line, log[:2000]
