"""The agent is delivered into pods, not expected in their images: an emptyDir at /trainguard, an init
container from the operator's image that copies the agent in, the command run through ``trainguard-entry``
(which looks for python3 in the image itself); and the entry's word that the agent is missing read back.

Pure manifest and observation checks; what the entry program does is tested on it (tests/integration/entry),
and in real containers on real nodes by tests/realk8s."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.k8s.cluster import KubeCluster
from trainguard.api.load import load_jobs
from trainguard.backends.k8s import delivery, manifests
from trainguard.backends.k8s.kinds import AITRAININGJOB
from trainguard.backends.k8s.observe import observed_pod
from trainguard.backends.k8s.shared import Shared

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
    assert names == [delivery.INSTALL_CONTAINER, "job-barrier"]
    install = spec["initContainers"][0]
    assert install["image"] == SETTINGS.agent_image
    assert install["command"] == ["/opt/trainguard/bin/trainguard-entry", "install", "/trainguard"]
    main = spec["containers"][0]
    (volume,) = [v for v in spec["volumes"] if v["name"] == delivery.AGENT_VOLUME]
    assert volume["emptyDir"] == {}
    assert {"name": delivery.AGENT_VOLUME, "mountPath": "/trainguard"} in install["volumeMounts"]
    # The entry records its probe there, and links a "python" for an image that has only python3.
    assert {"name": delivery.AGENT_VOLUME, "mountPath": "/trainguard"} in main["volumeMounts"]


def test_the_command_runs_through_the_entry_with_the_agent_options_then_the_command() -> None:
    main = _pod("trainer")["spec"]["containers"][0]
    command = main["command"]
    assert command[:2] == [delivery.ENTRY, "run"]
    assert command[command.index("--") + 1 :] == ["/bin/bash", "-c", "/usr/sbin/sshd && sleep infinity"]
    assert "args" not in main
    assert not any(
        "trainguard" in str(item.get("value")) for item in main["env"] if item["name"] == "PYTHONPATH"
    )


def _probed(
    message: str | None, name: str = delivery.PROBE_CONTAINER, summary: dict[str, Any] | None = None
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
        (json.dumps(NO_PYTHON), delivery.PROBE_CONTAINER, "the image has no python3 (PATH=/bin)"),
        (json.dumps(USABLE), delivery.PROBE_CONTAINER, None),
        (None, delivery.PROBE_CONTAINER, None),  # still probing
        ("not json", delivery.PROBE_CONTAINER, None),
        ("{broken", delivery.PROBE_CONTAINER, None),
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


def test_as_an_image_volume_the_agent_is_the_operators_image_mounted_read_only_and_no_container_of_ours_runs() -> (
    None
):
    settings = dataclasses.replace(SETTINGS, agent_delivery=delivery.AgentDelivery.IMAGE_VOLUME)
    job = load_jobs(CCE_JOB, [])[0].job
    spec = manifests.pod(
        AITRAININGJOB, job, launch(job, "launcher", 0, {"launcher": 1, "trainer": 3}), settings
    )["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["job-barrier"]  # CCE's own, and nothing of ours
    (volume,) = [v for v in spec["volumes"] if v["name"] == delivery.AGENT_VOLUME]
    assert volume == {
        "name": delivery.AGENT_VOLUME,
        "image": {"reference": SETTINGS.agent_image, "pullPolicy": "IfNotPresent"},
    }
    main = spec["containers"][0]
    assert {"name": delivery.AGENT_VOLUME, "mountPath": "/trainguard", "readOnly": True} in main[
        "volumeMounts"
    ]
    # The image whole at /trainguard (containerd 2.1 takes no subPath): the entry lies under its /opt/trainguard.
    assert main["command"][:2] == ["/trainguard/opt/trainguard/bin/trainguard-entry", "run"]


@pytest.mark.parametrize(
    ("kubelet", "runtime", "mounts"),
    [
        ("v1.36.5", "containerd://2.1.4", True),
        ("v1.35.0", "containerd://2.1.0", True),
        ("v1.35.2-gke.1", "cri-o://1.31.3", True),
        ("v1.40.0", "containerd://3.0.0", True),
        ("v1.34.9", "containerd://2.1.4", False),  # image volumes off by default before 1.35
        ("v1.36.5", "containerd://2.0.6", False),  # containerd mounts them from 2.1
        ("v1.36.5", "containerd://1.7.27", False),
        ("v1.36.5", "cri-o://1.30.0", False),
        ("v1.36.5", "docker://28.1.1", False),  # a runtime not known to
        ("fake", "containerd://2.1.4", False),  # kwok's default version
        ("", "", False),  # a node whose status says nothing yet
        ("v1.36.5", "containerd://", False),
    ],
)
def test_a_node_mounts_image_volumes_where_its_kubelet_and_runtime_are_new_enough(
    kubelet: str, runtime: str, mounts: bool
) -> None:
    assert delivery.supports_image_volume(kubelet, runtime) is mounts


@given(st.text(max_size=30), st.text(max_size=30))
def test_no_node_status_breaks_the_reading(kubelet: str, runtime: str) -> None:
    assert delivery.supports_image_volume(kubelet, runtime) in (True, False)


def _node(name: str, kubelet: str, runtime: str = "containerd://2.1.4") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": kubelet, "containerRuntimeVersion": runtime},
        },
    }


def test_auto_takes_the_image_volume_only_while_every_node_known_mounts_them() -> None:
    auto = dataclasses.replace(SETTINGS, agent_delivery=delivery.AgentDelivery.AUTO)
    shared = Shared(None, None, None, settings=auto)  # type: ignore[arg-type]
    how = lambda: shared.pod_settings().agent_delivery  # noqa: E731
    assert how() is delivery.AgentDelivery.INIT_CONTAINER  # no node known yet
    new, old = _node("n1", "v1.36.5"), _node("n2", "v1.34.2")
    shared.node_changed(new, new)
    assert how() is delivery.AgentDelivery.IMAGE_VOLUME
    assert shared.pod_settings() is shared.pod_settings()  # made once per answer, not once per pod
    shared.node_changed(old, old)
    assert how() is delivery.AgentDelivery.INIT_CONTAINER
    upgraded = _node("n2", "v1.35.1")
    shared.node_changed(upgraded, upgraded)
    assert how() is delivery.AgentDelivery.IMAGE_VOLUME
    shared.node_changed(old, old)
    shared.node_changed(old, None)  # the old node leaves
    assert how() is delivery.AgentDelivery.IMAGE_VOLUME
    assert shared.pod_settings().agent_image == SETTINGS.agent_image


@pytest.mark.parametrize(
    "pinned", [delivery.AgentDelivery.IMAGE_VOLUME, delivery.AgentDelivery.INIT_CONTAINER]
)
def test_a_delivery_the_operator_was_given_is_kept_whatever_the_nodes(pinned: delivery.AgentDelivery) -> None:
    shared = Shared(None, None, None, settings=dataclasses.replace(SETTINGS, agent_delivery=pinned))  # type: ignore[arg-type]
    for node in (_node("n1", "v1.36.5"), _node("n2", "fake")):
        shared.node_changed(node, node)
    assert shared.pod_settings().agent_delivery is pinned


@pytest.mark.k8s
@pytest.mark.parametrize("how", [delivery.AgentDelivery.IMAGE_VOLUME, delivery.AgentDelivery.INIT_CONTAINER])
def test_the_api_server_takes_each_delivery_as_it_is(
    kube_cluster: KubeCluster, how: delivery.AgentDelivery
) -> None:
    """Kubernetes 1.36's API server keeps the pod as sent (an image volume is not dropped as a disabled field)."""
    settings = dataclasses.replace(SETTINGS, agent_delivery=how)
    job = load_jobs(CCE_JOB, [])[0].job
    body = manifests.pod(
        AITRAININGJOB, job, launch(job, "trainer", 0, {"launcher": 1, "trainer": 3}), settings
    )
    body["metadata"].pop("ownerReferences", None)
    body["metadata"]["namespace"] = "default"
    stored = json.loads(
        kube_cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(body))
    )
    (volume,) = [v for v in stored["spec"]["volumes"] if v["name"] == delivery.AGENT_VOLUME]
    (sent,) = [v for v in body["spec"]["volumes"] if v["name"] == delivery.AGENT_VOLUME]
    assert volume == sent
    ours = [
        c["name"]
        for c in stored["spec"].get("initContainers") or []
        if c["name"] == delivery.INSTALL_CONTAINER
    ]
    assert ours == ([] if how is delivery.AgentDelivery.IMAGE_VOLUME else [delivery.INSTALL_CONTAINER])
