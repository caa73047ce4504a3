"""The job a simulation runs: the user's TrainingJob (or a default elastic one) sized to the GPUs asked for,
and the policy variants that ``--compare`` sets side by side.

The worker role (named worker or trainer, or of replicaType worker, else the largest role) gets one pod
per GPU node: replicas and maxReplicas become N/G; an elastic role keeps its minReplicas as the same share
of its maxReplicas. Other roles (a launcher, a master) keep their size and run on CPU nodes that never fail.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from trainguard.api import TrainingJob

_WORKER_WORDS = ("worker", "trainer")
#: Exceptional events an elastic job answers with a shrink instead of a replacement.
SHRINK_EVENTS = "nodeNotReady,PodForceDeleted,PodEvicted"
#: Seconds without progress before the default job's agent calls it a hang (heartbeats from the SDK).
DEFAULT_HANG_TIMEOUT = 300

JobData = dict[str, Any]


def default_job(workers: int) -> JobData:
    """An elastic PyTorch job: one worker per GPU node, replaced on any failure (scope Pod), hangs
    restarted in place after 5 minutes, allowed to shrink to half its size when pods fail for good."""
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": "llm"},
        "spec": {
            "frameworkType": "pytorch",
            "hang": {"timeoutSeconds": DEFAULT_HANG_TIMEOUT, "maxConsecutive": 3},
            "replicaSpecs": {
                "worker": {
                    "replicas": workers,
                    "minReplicas": max(1, math.ceil(workers / 2)),
                    "maxReplicas": workers,
                    "restartPolicy": "OnFailure",
                    "restartScope": "Pod",
                    "failPolicy": "None",
                    "faultTolerantPolicy": [
                        {
                            "exceptionalEvent": SHRINK_EVENTS,
                            "restartPolicy": "OnNodeFail",
                            "restartScope": "Pod",
                        }
                    ],
                }
            },
        },
    }


def worker_role(job: TrainingJob) -> str:
    roles = job.spec.replica_specs
    for name, spec in roles.items():
        words = (name.lower(), (spec.replica_type or "").lower())
        if any(word in _WORKER_WORDS for word in words):
            return name
    return max(roles, key=lambda name: roles[name].max_count)


def sized(job: TrainingJob, workers: int) -> TrainingJob:
    """``job`` with ``workers`` pods in its worker role (a SpecError-free ValueError if that cannot be)."""
    data = job.to_dict()
    role = worker_role(job)
    spec = job.spec.replica_specs[role]
    entry = data["spec"]["replicaSpecs"][role]
    entry["replicas"] = workers
    if spec.is_elastic:
        entry["minReplicas"] = max(1, math.ceil(workers * spec.min_count / spec.max_count))
        entry["maxReplicas"] = workers
    else:
        entry.pop("minReplicas", None)
        entry.pop("maxReplicas", None)
    data["metadata"]["uid"] = data["metadata"].get("uid") or f"sim-{job.name}"
    return TrainingJob.model_validate(data)


# ---- policy variants ------------------------------------------------------------------------------------


def with_scope(job: TrainingJob, scope: str) -> TrainingJob:
    """Every restart of a worker (by a rule or by the restartPolicy) with ``scope``: Pod, Replica or All."""
    data, entry = _worker_entry(job)
    entry["restartScope"] = scope
    for rule in entry.get("faultTolerantPolicy", []):
        rule["restartScope"] = scope
    return TrainingJob.model_validate(data)


def elastic(job: TrainingJob) -> TrainingJob:
    """Shrink instead of replacing a worker lost with its node (or force-deleted, or evicted), and grow back
    when capacity returns; other failures restart as before."""
    data, entry = _worker_entry(job)
    spec = job.spec.replica_specs[worker_role(job)]
    if not spec.is_elastic:
        entry["minReplicas"] = max(1, math.ceil(spec.replicas / 2))
        entry["maxReplicas"] = spec.replicas
    entry["failPolicy"] = "None"
    rule = {"exceptionalEvent": SHRINK_EVENTS, "restartPolicy": "Never"}
    entry["faultTolerantPolicy"] = [rule, *entry.get("faultTolerantPolicy", [])]
    return TrainingJob.model_validate(data)


def with_hang_detection(job: TrainingJob, timeout: float | None) -> TrainingJob:
    """Hang detection (restart in place after ``timeout`` seconds without progress) on, or off (None)."""
    data = copy.deepcopy(job.to_dict())
    if timeout is None:
        data["spec"].pop("hang", None)
    else:
        hang = data["spec"].get("hang") or {}
        data["spec"]["hang"] = {**hang, "enabled": True, "timeoutSeconds": timeout}
    return TrainingJob.model_validate(data)


def _worker_entry(job: TrainingJob) -> tuple[JobData, JobData]:
    data = copy.deepcopy(job.to_dict())
    return data, data["spec"]["replicaSpecs"][worker_role(job)]


#: The check's limits in the isolation comparison: bound only by the cluster's share (the job's own limits,
#: 3 isolations and 8 pods issued again by default, are for one job on a shared cluster, not a days-long run
#: on a cluster with 1 % bad nodes).
ISOLATION_LIMITS = {"maxIsolations": 1000, "maxReissues": 128, "reissueTimeoutSeconds": 7 * 86400}


def with_fault_check(job: TrainingJob, on: bool, limits: dict[str, float] | None = None) -> TrainingJob:
    """The fault tolerance check on (with ``limits``: faultCheck fields) or off (``faultCheck.enabled``)."""
    data = copy.deepcopy(job.to_dict())
    data["metadata"].get("annotations", {}).pop("trainguard.io/fault-check", None)
    check = dict(data["spec"].get("faultCheck") or {})
    data["spec"]["faultCheck"] = {**check, **(limits or {}), "enabled": on}
    return TrainingJob.model_validate(data)
