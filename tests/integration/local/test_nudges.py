"""A nudge is carried out by the survivor's agent, as on Kubernetes: the control plane only writes the pod's
nudge file, so a control plane killed right after that loses nothing. Real processes: the local runtime, the
agents, trainguard's torchrun with its workers, the rendezvous store."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from tests.unit.agent.waiting import wait_until

from trainguard.agent.nudge import Nudge, parse_nudge, workers
from trainguard.backends.local.reports import parse
from trainguard.controller.nudges import NUDGE_AFTER_SECONDS

from .harness import LocalRuntime
from .jobs import simple_job

pytestmark = pytest.mark.integration

JOB = "tj"
FAILED = "tj-worker-1"
SURVIVORS = ("tj-worker-0", "tj-worker-2")
#: torch imported by each pod's torchrun, and a round of 3 formed.
START_TIMEOUT = 90.0
#: A failed pod's repeated restarts wait this long (its first restart waits none).
BACKOFF_SECONDS = 3 * NUDGE_AFTER_SECONDS
#: A worker says it runs the script: a file named after its pid. (No collective: nothing but a nudge makes
#: the survivors' workers leave their round.)
SCRIPT = """
import os, sys, time
from pathlib import Path

Path(sys.argv[1], str(os.getpid())).touch()
while True:
    time.sleep(1)
"""


def _job(tmp_path: Path) -> dict[str, Any]:
    """3 workers in one torchrun rendezvous (``frameworkType: pytorch``); a failed one is restarted late."""
    script, ready = tmp_path / "train.py", tmp_path / "ready"
    script.write_text(SCRIPT)
    ready.mkdir()
    command = ["python", str(script), str(ready)]
    job = simple_job(JOB, command, replicas=3, restartPolicy="OnFailure", restartLimit=10)
    job["spec"]["frameworkType"] = "pytorch"
    job["spec"]["backoff"] = {"initialSeconds": BACKOFF_SECONDS, "maxSeconds": BACKOFF_SECONDS}
    return job


def _events(local: LocalRuntime, pod: str) -> list[dict[str, Any]]:
    """The first launch's report (read from its file: the control plane may be down)."""
    path = local.home.report_file(JOB, pod, 1)
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def _training(local: LocalRuntime, tmp_path: Path, pod: str) -> set[int]:
    """The workers of the pod's torchrun that run the script (not a helper it starts meanwhile)."""
    torchrun = parse(local.home.report_file(JOB, pod, 1)).child_pid
    found = workers(torchrun) if torchrun else []
    return {worker.pid for worker in found if (tmp_path / "ready" / str(worker.pid)).exists()}


def _nudged(local: LocalRuntime, pod: str) -> dict[str, Any] | None:
    return next((event for event in _events(local, pod) if event["event"] == "nudged"), None)


def _nudge_written(local: LocalRuntime) -> tuple[str, Nudge] | None:
    """The first survivor whose nudge file names a failure, and that failure."""
    for pod in SURVIVORS:
        nudge = parse_nudge(local.home.nudge_file(JOB, pod, 1).read_text())
        if nudge is not None:
            return pod, nudge
    return None


def _alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (a zombie has ended)."""
    alive = set()
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.add(pid)
    return alive


@contextlib.contextmanager
def _control_plane_back(local: LocalRuntime) -> Iterator[None]:
    """Whatever happens, a control plane at the end, which stops the pods at teardown."""
    try:
        yield
    finally:
        if local.control_plane() is None:
            with contextlib.suppress(Exception):
                local.view(JOB)


def test_a_nudge_written_before_the_control_plane_dies_is_carried_out_and_no_fault(
    local: LocalRuntime, tmp_path: Path
) -> None:
    local.submit(_job(tmp_path))
    local.wait_running(JOB, 3, timeout=START_TIMEOUT)
    old = {
        pod: wait_until(lambda pod=pod: _training(local, tmp_path, pod), f"{pod} training", START_TIMEOUT)
        for pod in SURVIVORS
    }
    assert local.cli("chaos", "kill", FAILED, "--exit-code", "1").code == 0

    with _control_plane_back(local):
        # The moment the control plane has handed the failure to a survivor's agent, it dies.
        due = NUDGE_AFTER_SECONDS + 30
        pod, nudge = wait_until(lambda: _nudge_written(local), "a survivor's nudge file", due)
        local.kill_control_plane()
        assert nudge.token.startswith(f"{FAILED}#")

        # Without a control plane, the survivor's agent SIGKILLs its workers older than the failure; torchrun
        # sees them fail, and the agent's report leaves them out (no workers-restarted line). The failed pod's
        # first restart waits no backoff: its new incarnation's round may have restarted some of them first.
        nudged = wait_until(lambda: _nudged(local, pod), f"{pod}'s agent nudged", 10)
        assert nudged["token"] == nudge.token
        assert set(nudged["killed"]) <= old[pod], (nudged, old[pod])
        wait_until(lambda: not _alive(old[pod]), f"the old workers of {pod} gone", 10)
        assert local.control_plane() is None

    # The next command brings the control plane back: it nudges the other survivor if it had not, the
    # failed pod comes back (at once: a first restart), and a new round of 3 forms.
    def settled(view: dict[str, Any]) -> bool:
        running = {p["name"] for p in view["status"]["pods"] if p["phase"] == "Running"}
        return view["status"]["phase"] == "Running" and running == {FAILED, *SURVIVORS}

    local.wait(JOB, settled, BACKOFF_SECONDS + START_TIMEOUT, "all 3 workers running again")
    for survivor in SURVIVORS:
        again = wait_until(
            lambda s=survivor: _training(local, tmp_path, s), f"{survivor} training again", START_TIMEOUT
        )
        assert not again & old[survivor], f"{survivor} runs its old workers still"
        assert (_nudged(local, survivor) or {}).get("token") == nudge.token
        assert not [e for e in _events(local, survivor) if e["event"] == "workers-restarted"]

    # Only the failed pod's fault is in the history: the survivors' restarts were no fault of theirs.
    view = local.view(JOB)
    faults = [
        (e["pod"], e["fault"], e["exitCode"]) for e in view["status"]["history"] if e["kind"] == "fault"
    ]
    assert faults == [(FAILED, "Exited", 1)]
    generations = {p["name"]: p["generation"] for p in view["status"]["pods"]}
    assert generations == {FAILED: 2, SURVIVORS[0]: 1, SURVIVORS[1]: 1}
    nudges = [e for e in local.call("events", job=JOB) if e["reason"] == "Nudged"]
    assert sorted(e["object"] for e in nudges) == sorted(SURVIVORS)
    assert all(e["message"].startswith(f"nudged for {nudge.token}: the pod's agent") for e in nudges)
