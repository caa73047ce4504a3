"""The agent inside operator pods: the job's hang settings reach it, and its final report comes back.

Pure manifest and observation checks; no cluster needed (kwok pods run no processes, so the agent's part in
a real container is proven by the agent's own integration tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.api.load import load_jobs
from trainguard.backends.k8s import manifests
from trainguard.backends.k8s.kinds import AITRAININGJOB
from trainguard.backends.k8s.observe import observed_pod

from .launches import launch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
CCE_JOB = EXAMPLES / "cce-horovod-elastic.yaml"


def _command(overlays: list[Path]) -> list[str]:
    job = load_jobs(CCE_JOB, overlays)[0].job
    pod = manifests.pod(
        AITRAININGJOB, job, launch(job, "trainer", 0, {"launcher": 1, "trainer": 3}), manifests.PodSettings()
    )
    container = pod["spec"]["containers"][0]
    assert container["terminationMessagePath"] == "/dev/termination-log"
    return list(container["command"])


def test_without_hang_handling_the_agent_gets_the_pods_grace_period(tmp_path: Path) -> None:
    command = _command([])
    agent_end = command.index("--")
    assert command[:2] == [
        "/trainguard/bin/trainguard-entry",
        "run",
    ]  # the agent, delivered: the image needs only python3
    assert command[2:agent_end] == ["--grace", "300"]  # the trainer's terminationGracePeriodSeconds
    assert command[agent_end + 1 :] == ["/bin/bash", "-c", "/usr/sbin/sshd && sleep infinity"]


def test_hang_retry_turns_on_detection_and_restart_in_place_in_the_pod(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay.json"
    overlay.write_text(
        json.dumps({"kind": "job", "metadata": {"annotations": {"fault-tolerance/hang-retry": "true"}}})
    )
    command = _command([overlay])
    options = command[2 : command.index("--")]
    assert options[options.index("--hang-timeout") + 1] == "1800"
    assert options[options.index("--max-consecutive") + 1] == "3"


def _pod(terminated: dict[str, object]) -> dict[str, object]:
    return {
        "metadata": {"name": "j-trainer-0", "labels": {
            "trainguard.io/role": "trainer", "trainguard.io/index": "0", "trainguard.io/generation": "1",
        }},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": terminated}}]},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (json.dumps({"event": "gave-up", "reason": "Hang", "exit_code": 137}), "Hang"),
        (json.dumps({"event": "exited", "exit_code": 137, "signal": "SIGKILL"}), None),
        ("not json {", None),
        (None, None),
    ],
)
def test_the_agents_termination_message_tells_a_hang_from_a_kill(
    message: str | None, reason: str | None
) -> None:
    terminated: dict[str, object] = {"exitCode": 137, "reason": "Error"}
    if message is not None:
        terminated["message"] = message
    observed = observed_pod(_pod(terminated))
    assert (observed.exit_code, observed.reason) == (137, reason)
