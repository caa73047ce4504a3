"""LaunchPod actions as the controller makes them, for tests that render pods without a reconcile."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from trainguard.api import TrainingJob, pod_name
from trainguard.api.load import load_object
from trainguard.backends.k8s import services
from trainguard.controller.backend import LaunchPod
from trainguard.controller.launchspec import launch_spec


def launch(job: TrainingJob, role: str, index: int, sizes: Mapping[str, int]) -> LaunchPod:
    """The first launch of ``role``'s pod ``index`` in a world of ``sizes``, on Kubernetes' network."""
    spec = launch_spec(job, role, index, 1, 0, sizes, services.network(job))
    name = pod_name(job.name, role, index)
    return LaunchPod(
        key="k", pod=name, role=role, index=index, generation=1, restart_count=0, reason="start", spec=spec
    )


CCE_JOB = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "cce-horovod-elastic.yaml"


def cce_job(**spec: Any) -> TrainingJob:
    """CCE's AITrainingJob example (uid ``uid-1``), with ``spec`` fields replaced."""
    data = yaml.safe_load(CCE_JOB.read_text())
    data["metadata"]["uid"] = "uid-1"
    data["spec"].update(spec)
    return load_object(data, "cce.yaml").job


def pod_file(pod: Mapping[str, Any], path: str) -> dict[str, Any] | None:
    """What gives the pod's first container the file at ``path``, through a projected volume mounted over its
    directory: the ``serviceAccountToken`` source or the ``downwardAPI`` item; None where nothing does."""
    container = pod["spec"]["containers"][0]
    directory, name = path.rsplit("/", 1)
    volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"]) or {}
        if mount["mountPath"] != directory or "projected" not in volume:
            continue
        assert mount.get("readOnly") is True, f"{path}: the agent's files are mounted read-only"
        for source in volume["projected"]["sources"]:
            token = source.get("serviceAccountToken")
            if token is not None and token.get("path") == name:
                return dict(token)
            for item in (source.get("downwardAPI") or {}).get("items") or []:
                if item["path"] == name:
                    return dict(item)
    return None


def env_of(pod: Mapping[str, Any]) -> dict[str, str]:
    """What the first container's command sees: its ``env`` (values, not references), then what the agent sets
    from its ``--env`` options where the ``env`` has not got it."""
    container = pod["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container.get("env") or [] if "value" in item}
    command = container.get("command") or []
    end = command.index("--") if "--" in command else 0
    for option in command[:end]:
        if option.startswith("--env="):
            name, _, value = option[len("--env=") :].partition("=")
            env.setdefault(name, value)
    return env
