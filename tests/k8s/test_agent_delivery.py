"""The agent is delivered into pods, not expected in their images: an emptyDir at /trainguard, an init
container from the operator's image that copies the agent in, a second one in the pod's own image that looks
for python3 there, the command run through ``trainguard-entry``; and the probe's answer read back.

Pure manifest and observation checks; what the entry program does is tested on it (tests/integration/entry),
and in real containers on real nodes by tests/realk8s."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainguard.api.load import load_jobs
from trainguard.backends.k8s import manifests
from trainguard.backends.k8s.kinds import AITRAININGJOB
from trainguard.backends.k8s.observe import observed_pod

from .launches import launch

CCE_JOB = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "cce-horovod-elastic.yaml"
SETTINGS = manifests.PodSettings(agent_image="registry.local:5000/trainguard/operator:test")


def _pod(role: str) -> dict[str, Any]:
    job = load_jobs(CCE_JOB, [])[0].job
    return manifests.pod(AITRAININGJOB, job, launch(job, role, 0, {"launcher": 1, "trainer": 3}), SETTINGS)


def test_the_agent_is_copied_in_before_the_pods_own_init_containers() -> None:
    spec = _pod("launcher")["spec"]
    names = [c["name"] for c in spec["initContainers"]]
    # CCE's job barrier still runs, after ours: it is the last thing the launcher waits for.
    assert names == [manifests.INSTALL_CONTAINER, manifests.PROBE_CONTAINER, "job-barrier"]
    install, probe = spec["initContainers"][:2]
    assert install["image"] == SETTINGS.agent_image
    assert install["command"] == ["/opt/trainguard/bin/trainguard-entry", "install", "/trainguard"]
    main = spec["containers"][0]
    assert probe["image"] == main["image"]  # the probe looks into the pod's own image
    assert probe["command"] == [manifests.ENTRY, "probe"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == manifests.AGENT_VOLUME]
    assert volume["emptyDir"] == {}
    for container in (install, probe):
        assert {"name": manifests.AGENT_VOLUME, "mountPath": "/trainguard"} in container["volumeMounts"]
    assert {"name": manifests.AGENT_VOLUME, "mountPath": "/trainguard", "readOnly": True} in main[
        "volumeMounts"
    ]


def test_the_command_runs_through_the_entry_with_the_agent_options_then_the_command() -> None:
    main = _pod("trainer")["spec"]["containers"][0]
    command = main["command"]
    assert command[:2] == [manifests.ENTRY, "run"]
    assert command[command.index("--") + 1 :] == ["/bin/bash", "-c", "/usr/sbin/sshd && sleep infinity"]
    assert "args" not in main
    assert not any(
        "trainguard" in str(item.get("value")) for item in main["env"] if item["name"] == "PYTHONPATH"
    )


def test_the_probe_runs_as_the_container_would() -> None:
    job = load_jobs(CCE_JOB, [])[0].job
    container = job.role("trainer").template["spec"]["containers"][0]
    container["securityContext"] = {"runAsUser": 1000}
    container["env"] = [{"name": "PATH", "value": "/opt/conda/bin:/usr/bin"}, {"name": "X", "value": "1"}]
    pod = manifests.pod(
        AITRAININGJOB, job, launch(job, "trainer", 0, {"launcher": 1, "trainer": 3}), SETTINGS
    )
    probe = pod["spec"]["initContainers"][1]
    assert probe["securityContext"] == {"runAsUser": 1000}
    assert probe["imagePullPolicy"] == container["imagePullPolicy"]
    assert probe["env"] == [{"name": "PATH", "value": "/opt/conda/bin:/usr/bin"}]


def _probed(message: str | None, name: str = manifests.PROBE_CONTAINER) -> dict[str, Any]:
    state = {"terminated": {"exitCode": 0, "message": message}} if message is not None else {"running": {}}
    return {
        "metadata": {"name": "j-trainer-0", "labels": {
            "trainguard.io/role": "trainer", "trainguard.io/index": "0", "trainguard.io/generation": "1",
        }},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Running", "initContainerStatuses": [{"name": name, "state": state}]},
    }  # fmt: skip


NO_PYTHON = {"python": "", "version": "", "usable": False, "reason": "the image has no python3 (PATH=/bin)"}


@pytest.mark.parametrize(
    ("message", "name", "missing"),
    [
        (json.dumps(NO_PYTHON), manifests.PROBE_CONTAINER, "the image has no python3 (PATH=/bin)"),
        (json.dumps({**NO_PYTHON, "reason": ""}), manifests.PROBE_CONTAINER, "the image has no python3 the agent can run with"),
        (json.dumps({"python": "/usr/bin/python3", "version": "3.11.2", "usable": True}), manifests.PROBE_CONTAINER, None),
        (None, manifests.PROBE_CONTAINER, None),  # still probing
        ("not json", manifests.PROBE_CONTAINER, None),
        ("{broken", manifests.PROBE_CONTAINER, None),
        (json.dumps(NO_PYTHON), "job-barrier", None),  # someone else's init container
    ],
)  # fmt: skip
def test_the_probes_answer_is_read_from_its_termination_message(
    message: str | None, name: str, missing: str | None
) -> None:
    assert observed_pod(_probed(message, name)).agent_missing == missing
