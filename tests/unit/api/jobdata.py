"""Job documents for the api tests, as plain data: CCE's AITrainingJob example, a small native job and
Kubeflow PyTorchJobs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from trainguard.api import SpecError
from trainguard.api.load import LoadedJob, load_bytes, load_overlay

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "jobs"
CCE_JOB = EXAMPLES / "cce-horovod-elastic.yaml"
OVERLAY = EXAMPLES / "modelarts-overlay.json"


def cce_job() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(CCE_JOB.read_text())
    return data


def container(name: str = "trainer") -> dict[str, Any]:
    return {"name": name, "image": "python:3.11", "command": ["python", "-c", "print(1)"]}


def native(**spec: Any) -> dict[str, Any]:
    """A small valid native TrainingJob; ``spec`` entries replace the defaults."""
    job: dict[str, Any] = {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "small"},
        "spec": {
            "replicaSpecs": {
                "worker": {
                    "replicas": 2,
                    "minReplicas": 1,
                    "maxReplicas": 3,
                    "restartPolicy": "OnFailure",
                    "faultTolerantPolicy": [{"exitCodes": "137", "restartPolicy": "ExitCode"}],
                    "template": {"spec": {"containers": [container()]}},
                }
            }
        },
    }
    job["spec"].update(spec)
    return job


def pytorchjob(
    master: bool = True, workers: int = 2, restart: str = "OnFailure", **spec: Any
) -> dict[str, Any]:
    """A Kubeflow PyTorchJob; ``spec`` entries (runPolicy, elasticPolicy, nprocPerNode) are added."""

    def replica(replicas: int) -> dict[str, Any]:
        return {
            "replicas": replicas,
            "restartPolicy": restart,
            "template": {"spec": {"containers": [container("pytorch")]}},
        }

    replicas = {"Worker": replica(workers)}
    if master:
        replicas = {"Master": replica(1), **replicas}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "torch", "namespace": "ml"},
        "spec": {"pytorchReplicaSpecs": replicas, **spec},
    }


def load(data: Any, source: str = "job.yaml", overlays: tuple[Path, ...] = ()) -> list[LoadedJob]:
    """Load ``data`` written as YAML (or JSON when ``source`` ends in .json)."""
    text = json.dumps(data) if source.endswith(".json") else yaml.safe_dump(data, sort_keys=False)
    return load_bytes(text.encode(), source, [load_overlay(path) for path in overlays])


def load_one(data: Any, source: str = "job.yaml", overlays: tuple[Path, ...] = ()) -> LoadedJob:
    jobs = load(data, source, overlays)
    assert len(jobs) == 1
    return jobs[0]


def error_of(data: Any, source: str = "job.yaml") -> SpecError:
    try:
        load(data, source)
    except SpecError as error:
        return error
    raise AssertionError("the document loaded, but an error was expected")


def edited(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``data`` with the dotted ``path`` set to ``value`` (a missing ``value`` deletes it)."""
    result = copy.deepcopy(data)
    node: Any = result
    parts = [int(p) if p.isdigit() else p for p in path.split(".")]
    for part in parts[:-1]:
        node = node[part]
    if value is DELETE:
        del node[parts[-1]]
    else:
        node[parts[-1]] = value
    return result


DELETE = object()
