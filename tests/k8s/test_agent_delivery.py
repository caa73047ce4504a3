"""The agent is delivered into pods, not expected in their images: an emptyDir at /trainguard, an init
container from the operator's image that copies the agent in, the command run through ``trainguard-entry``
(which looks for python3 in the image itself); and the entry's word that the agent is missing read back.

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
    # CCE's job barrier still runs, after ours: it is the last thing the launcher waits for. No container of
    # ours runs in the pod's own image but its own: the entry probes for python3 there when it starts.
    assert names == [manifests.INSTALL_CONTAINER, "job-barrier"]
    install = spec["initContainers"][0]
    assert install["image"] == SETTINGS.agent_image
    assert install["command"] == ["/opt/trainguard/bin/trainguard-entry", "install", "/trainguard"]
    main = spec["containers"][0]
    (volume,) = [v for v in spec["volumes"] if v["name"] == manifests.AGENT_VOLUME]
    assert volume["emptyDir"] == {}
    assert {"name": manifests.AGENT_VOLUME, "mountPath": "/trainguard"} in install["volumeMounts"]
    # The entry records its probe there, and links a "python" for an image that has only python3.
    assert {"name": manifests.AGENT_VOLUME, "mountPath": "/trainguard"} in main["volumeMounts"]


def test_the_command_runs_through_the_entry_with_the_agent_options_then_the_command() -> None:
    main = _pod("trainer")["spec"]["containers"][0]
    command = main["command"]
    assert command[:2] == [manifests.ENTRY, "run"]
    assert command[command.index("--") + 1 :] == ["/bin/bash", "-c", "/usr/sbin/sshd && sleep infinity"]
    assert "args" not in main
    assert not any(
        "trainguard" in str(item.get("value")) for item in main["env"] if item["name"] == "PYTHONPATH"
    )


def _probed(
    message: str | None, name: str = manifests.PROBE_CONTAINER, summary: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A pod whose container ``name`` (an init container of an older operator's pods, or the training container
    ``main``) ended with ``message`` (None: it runs), its agent's summary ``summary`` in its annotation."""
    state = {"terminated": {"exitCode": 0, "message": message}} if message is not None else {"running": {}}
    statuses = {
        "containerStatuses" if name == "main" else "initContainerStatuses": [{"name": name, "state": state}]
    }
    annotations = {manifests.ANNOTATION_AGENT_REPORT: json.dumps(summary)} if summary is not None else {}
    return {
        "metadata": {"name": "j-trainer-0", "annotations": annotations, "labels": {
            "trainguard.io/role": "trainer", "trainguard.io/index": "0", "trainguard.io/generation": "1",
        }},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Running", **statuses},
    }  # fmt: skip


NO_PYTHON = {"python": "", "version": "", "usable": False, "reason": "the image has no python3 (PATH=/bin)"}
USABLE = {"python": "/usr/bin/python3", "version": "3.11.2", "usable": True}


@pytest.mark.parametrize(
    ("message", "name", "missing"),
    [
        # The training container ended, the entry's probe still its termination message.
        (json.dumps(NO_PYTHON), "main", "the image has no python3 (PATH=/bin)"),
        (json.dumps({**NO_PYTHON, "reason": ""}), "main", "the image has no python3 the agent can run with"),
        (json.dumps({"event": "exited", "exit_code": 1}), "main", None),  # the agent's own final report
        ("Error: something", "main", None),  # the command's own message
        (None, "main", None),  # still running
        # A pod an older operator made: its probe init container said it.
        (json.dumps(NO_PYTHON), manifests.PROBE_CONTAINER, "the image has no python3 (PATH=/bin)"),
        (json.dumps(USABLE), manifests.PROBE_CONTAINER, None),
        (None, manifests.PROBE_CONTAINER, None),  # still probing
        ("not json", manifests.PROBE_CONTAINER, None),
        ("{broken", manifests.PROBE_CONTAINER, None),
        (json.dumps(NO_PYTHON), "job-barrier", None),  # someone else's init container
    ],
)  # fmt: skip
def test_the_probes_answer_is_read_from_a_termination_message(
    message: str | None, name: str, missing: str | None
) -> None:
    assert observed_pod(_probed(message, name)).agent_missing == missing


@pytest.mark.parametrize(
    ("summary", "missing"),
    [
        ({"agentMissing": "the image has no python3 (PATH=/bin)"}, "the image has no python3 (PATH=/bin)"),
        ({"agentMissing": ""}, None),
        ({"attempt": 1, "hangs": 0}, None),  # the agent's own summary: it runs
    ],
)
def test_the_entrys_word_to_the_operator_is_read_while_the_container_runs(
    summary: dict[str, Any], missing: str | None
) -> None:
    assert observed_pod(_probed(None, "main", summary)).agent_missing == missing
