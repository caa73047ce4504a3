"""Jobs for the local runtime's tests: the shape and policies of CCE's AITrainingJob
example, with small local commands."""

from __future__ import annotations

import copy
import sys
from typing import Any

#: A long-running command that prints now and then (so that it is never mistaken for a hang).
TICKING = [
    sys.executable,
    "-u",
    "-c",
    "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.3)",
]
SLEEPING = ["/bin/sh", "-c", "sleep 600"]


def container(command: list[str]) -> dict[str, Any]:
    return {
        "spec": {"terminationGracePeriodSeconds": 3, "containers": [{"name": "main", "command": command}]}
    }


def cce_job(
    name: str = "cce", launcher: list[str] = SLEEPING, trainer: list[str] = SLEEPING
) -> dict[str, Any]:
    """CCE's example (test-horovod-elastic) in native form: a launcher and 3 trainers (1..5), its rules."""
    common = {
        "restartLimit": 100,
        "restartPolicy": "OnNodeFailWithExitCode",
        "restartScope": "Pod",
        "restartTimeLimit": 60,
        "restartTimeout": 864000,
    }
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "cleanPodPolicy": "None",
            "completePolicy": "Any",
            "failPolicy": "Any",
            "frameworkType": "horovod",
            "backoff": {"initialSeconds": 0.2, "maxSeconds": 1},
            "replicaSpecs": {
                "launcher": {
                    **common,
                    "completePolicy": "All",
                    "failPolicy": "Any",
                    "faultTolerantPolicy": [
                        {"exitCodes": "129,101", "restartPolicy": "ExitCode", "restartScope": "Pod"},
                        {
                            "exceptionalEvent": "nodeNotReady",
                            "restartPolicy": "OnNodeFail",
                            "restartScope": "Pod",
                        },
                    ],
                    "maxReplicas": 1,
                    "minReplicas": 1,
                    "replicaType": "master",
                    "replicas": 1,
                    "template": container(launcher),
                },
                "trainer": {
                    **common,
                    "completePolicy": "None",
                    "failPolicy": "None",
                    "faultTolerantPolicy": [
                        {
                            "exceptionalEvent": "nodeNotReady,PodForceDeleted",
                            "restartPolicy": "OnNodeFail",
                            "restartScope": "Pod",
                        }
                    ],
                    "maxReplicas": 5,
                    "minReplicas": 1,
                    "replicaType": "worker",
                    "replicas": 3,
                    "template": container(trainer),
                },
            },
        },
    }


def simple_job(name: str, command: list[str], replicas: int = 1, **role: Any) -> dict[str, Any]:
    """One role, ``worker``, running ``command``; ``role`` sets its fields (restartPolicy, ...)."""
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "backoff": {"initialSeconds": 0.2, "maxSeconds": 1},
            "replicaSpecs": {"worker": {"replicas": replicas, "template": container(command), **role}},
        },
    }


def with_spec(job: dict[str, Any], **spec: Any) -> dict[str, Any]:
    changed = copy.deepcopy(job)
    changed["spec"].update(spec)
    return changed
