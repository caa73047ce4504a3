"""A torch job in which one rank stops calling allreduce: its pod's agent sees the heartbeats stop and
restarts it in place; the job trains on to the end."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainguard.demo.session import Session

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

HERE = Path(__file__).resolve().parent
#: Above a pod's start-up on a busy machine: until the first heartbeat, log output and CPU count as progress.
TIMEOUT = 10.0


def test_a_rank_that_stops_calling_allreduce_is_restarted_in_place(session: Session) -> None:
    marker = session.root / "stuck-at"
    events = session.root / "stuck" / "events.jsonl"
    events.parent.mkdir()
    container = {
        "name": "trainer",
        "command": [sys.executable, str(HERE / "stuck_rank.py")],
        "args": [
            "--steps=40",
            "--stuck-pod=stuck-worker-1",
            "--stuck-at=10",
            f"--marker={marker}",
            f"--events={events}",
        ],
    }
    spec = {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "stuck"},
        "spec": {
            "frameworkType": "pytorch",
            "hang": {"timeoutSeconds": TIMEOUT, "gracePeriodSeconds": 2},
            "replicaSpecs": {
                "worker": {
                    "replicas": 2,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [container]}},
                }
            },
        },
    }
    job = session.submit(spec)
    session.wait("the job to succeed", lambda: session.phase(job) in ("Succeeded", "Failed"), 240, poll=0.5)
    view = session.view(job)
    assert view["status"]["phase"] == "Succeeded", view["status"].get("message")

    stuck_at = float(marker.read_text())
    hangs = [entry for entry in view["status"]["history"] if entry.get("fault") == "Hang"]
    mine = [entry for entry in hangs if entry["pod"] == "stuck-worker-1"]
    assert mine, f"no hang recorded for the stuck pod: {hangs}"
    assert mine[0]["action"] == "restart-in-place"
    assert not mine[0]["counted"]
    # The agent polls heartbeats every 0.25 s; the control plane reads its report within a tick.
    assert mine[0]["at"] - stuck_at <= TIMEOUT + 2 + 0.5
    assert not any(entry["counted"] for entry in view["status"]["history"])  # hangs spend no restart budget
    done = [line for line in events.read_text().splitlines() if '"done"' in line]
    assert len(done) == 1
