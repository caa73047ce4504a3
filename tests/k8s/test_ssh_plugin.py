"""CCE's ``plugin.ssh``: the job's own key pair, in a Secret, mounted where ssh looks (pure, no cluster). The
key is checked with OpenSSH's own ssh-keygen where it is installed."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from trainguard.backends.k8s import manifests, ssh
from trainguard.backends.k8s.kinds import AITRAININGJOB

from .launches import cce_job as _cce
from .launches import launch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"


def test_every_pod_of_cces_job_gets_the_key_pair_where_ssh_looks() -> None:
    job = _cce()
    assert ssh.wants_ssh(job)
    sizes = {"launcher": 1, "trainer": 3}
    for role in ("launcher", "trainer"):
        pod = manifests.pod(AITRAININGJOB, job, launch(job, role, 0, sizes), manifests.PodSettings())
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == ssh.VOLUME]
        assert volume["secret"]["secretName"] == f"{job.name}-ssh"
        assert volume["secret"]["defaultMode"] == 0o600
        assert {item["path"] for item in volume["secret"]["items"]} == {
            "id_ed25519", "id_ed25519.pub", "authorized_keys", "config",
        }  # fmt: skip
        mounts = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == ssh.VOLUME]
        assert mounts == [{"name": ssh.VOLUME, "mountPath": "/root/.ssh", "readOnly": True}]


def test_no_plugin_no_key_and_a_template_that_mounts_ssh_keeps_its_own() -> None:
    job = _cce(plugin={"discovery": [""]})
    assert not ssh.wants_ssh(job)
    pod = manifests.pod(
        AITRAININGJOB, job, launch(job, "trainer", 0, {"trainer": 1}), manifests.PodSettings()
    )
    assert all(v["name"] != ssh.VOLUME for v in pod["spec"]["volumes"])
    spec: dict[str, Any] = {}
    container = {"volumeMounts": [{"name": "mine", "mountPath": "/root/.ssh/"}]}
    ssh.mount(spec, container, _cce())
    assert container["volumeMounts"] == [{"name": "mine", "mountPath": "/root/.ssh/"}]
    assert "volumes" not in spec


def test_a_trainer_is_ready_once_its_sshd_answers_and_the_launcher_is_not_probed() -> None:
    """horovodrun blacklists a host it could not ssh to: the controller lists a host only once its pod is Ready,
    which the trainers' sshd decides (port 22, horovodrun's default). A container's own probe is kept."""
    job = _cce()
    sizes = {"launcher": 1, "trainer": 3}
    trainer = manifests.pod(AITRAININGJOB, job, launch(job, "trainer", 1, sizes), manifests.PodSettings())
    assert trainer["spec"]["containers"][0]["readinessProbe"] == {
        "tcpSocket": {"port": 22},
        "periodSeconds": 2,
    }
    launcher = manifests.pod(AITRAININGJOB, job, launch(job, "launcher", 0, sizes), manifests.PodSettings())
    assert "readinessProbe" not in launcher["spec"]["containers"][0]
    container = {"readinessProbe": {"exec": {"command": ["true"]}}}
    ssh.readiness_probe(container)
    assert container == {"readinessProbe": {"exec": {"command": ["true"]}}}
    without = _cce(plugin={"discovery": [""]})
    pod = manifests.pod(AITRAININGJOB, without, launch(without, "trainer", 0, sizes), manifests.PodSettings())
    assert "readinessProbe" not in pod["spec"]["containers"][0]


def test_the_secret_holds_a_fresh_pair_that_authorizes_itself() -> None:
    job = _cce()
    first, second = ssh.secret(AITRAININGJOB, job), ssh.secret(AITRAININGJOB, job)
    assert first["metadata"]["name"] == "test-horovod-elastic-ssh"
    assert first["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    data = {key: base64.b64decode(value).decode() for key, value in first["data"].items()}
    assert data["authorized_keys"] == data["ssh-publickey"]
    assert data["ssh-publickey"].startswith("ssh-ed25519 ")
    assert data["ssh-privatekey"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert "StrictHostKeyChecking no" in data["config"]
    assert "ServerAliveInterval 5" in data["config"]  # a dead host ends horovodrun's ssh within 15 s
    assert first["data"]["ssh-privatekey"] != second["data"]["ssh-privatekey"]  # one pair per job


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="OpenSSH's ssh-keygen is not installed here")
def test_openssh_reads_the_private_key_and_derives_the_same_public_key(tmp_path: Path) -> None:
    private, public = ssh.key_pair("test")
    key = tmp_path / "id_ed25519"
    key.write_text(private)
    key.chmod(0o600)
    derived = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    assert derived.split()[:2] == public.split()[:2]


@pytest.mark.skipif(shutil.which("ssh") is None, reason="OpenSSH's ssh is not installed here")
def test_openssh_reads_the_client_config_and_gives_up_on_a_silent_host(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(ssh.client_config(_cce()))
    shown = subprocess.run(
        ["ssh", "-F", str(config), "-G", "10.1.2.3"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.splitlines()
    assert {"stricthostkeychecking false", "connecttimeout 10", "serveraliveinterval 5",
            "serveralivecountmax 3"} <= set(shown)  # fmt: skip
