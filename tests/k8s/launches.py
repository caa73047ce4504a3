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
