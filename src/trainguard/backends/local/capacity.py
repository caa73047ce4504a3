"""How big a job the local runtime runs, and the virtual nodes it makes for one.

Every pod is a process on this machine (an agent and its command), so the local runtime runs at most
``TRAINGUARD_MAX_PODS`` pods of one job (default 256), whatever the job model allows (100,000 per role). A
job larger than that at its ``replicas`` is accepted and waits, held: the controller does not take it up
(no pod slots, no pods, nothing to do on each pass), its status says why (reason ``Unschedulable``), and it
starts once it fits (its replicas lowered with ``scale`` or ``apply``). A distributed job needs all of its
pods, so starting the few that fit would only keep them waiting for the rest (gang scheduling, as Volcano
does it). A job that has started is never made larger than the limit: such a ``scale`` or ``apply`` is
refused and changes nothing.

The decision is the engine's (``trainguard.controller.admission``, limit kind ``MACHINE``); here are the
number, the words that name the runtime's own commands, and the nodes a job that fits gets.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.local.placement import free_of, room
from trainguard.backends.local.records import JobRecord, NodeRecord
from trainguard.backends.local.store import Store
from trainguard.controller.admission import Oversize
from trainguard.controller.status import JobStatus

ENV_MAX_PODS = "TRAINGUARD_MAX_PODS"
DEFAULT_MAX_PODS = 256
#: ``TRAINGUARD_MAX_PODS`` is never taken above this: one reconcile of a job this size takes seconds, not
#: minutes (benchmarks/local_reconcile.py), so no setting lets one job keep the control plane busy for long.
CEILING_MAX_PODS = 4096


def max_pods(environ: Mapping[str, str] = os.environ) -> int:
    """The most pods of one job the local runtime runs: ``TRAINGUARD_MAX_PODS`` (a whole number, 1 or more;
    at most ``CEILING_MAX_PODS``), else ``DEFAULT_MAX_PODS``."""
    text = environ.get(ENV_MAX_PODS, "").strip()
    if not text.isdigit() or int(text) < 1:
        return DEFAULT_MAX_PODS
    return min(int(text), CEILING_MAX_PODS)


def explain(over: Oversize) -> str:
    """Why the job cannot run here at that size: the number, the limit and the fix."""
    return (
        f"it has {over.pods:,} pods and the local runtime runs at most {over.limit:,} pods of a job on this "
        f"machine ({ENV_MAX_PODS}); lower its replicas ('trainguard scale {over.job} --role ROLE --replicas N' "
        "or 'trainguard apply'), or run it on Kubernetes"
    )


def started(record: JobRecord) -> bool:
    """Whether the controller has taken the job up (it has pod slots, maybe pods)."""
    return record.status.get("startedAt") is not None


def desired(record: JobRecord, job: TrainingJob) -> dict[str, int]:
    """role -> pods the role should have now: the latest accepted size, else the spec's replicas."""
    known = record.status.get("desired") or {}
    return {role: int(known.get(role, spec.replicas)) for role, spec in job.spec.replica_specs.items()}


def held_status(status: JobStatus) -> dict[str, Any]:
    """The stored status of a job that waits because it does not fit (the engine's ``Hold.status``), replaced
    when it starts: its phase, reason and message, nothing else."""
    return {"phase": status.phase.value, "reason": status.reason, "message": status.message}


# ---- virtual nodes ---------------------------------------------------------------------------------------


def ensure_nodes(store: Store, job: TrainingJob, nodes: int | None, limit: int) -> None:
    """``--nodes N``: at least N nodes with room for the job at its largest; default: one single-slot node
    per pod at the job's largest, plus a spare one to move to when a node goes down. "Largest" is every role
    at ``maxReplicas``, but never more than the pods a job runs here (``limit``)."""
    largest = min(sum(spec.max_count for spec in job.spec.replica_specs.values()), limit)
    if nodes is None:
        ensure_free(store, largest + 1)
        return
    slots = max(1, math.ceil(largest / nodes))
    existing = store.list_nodes()
    store.add_nodes([NodeRecord(f"node-{index}", slots) for index in range(len(existing), nodes)])
    for node in existing[:nodes]:
        if node.slots < slots:
            store.update_node(replace(node, slots=slots))  # Ready or not, isolated or not, as it was


def ensure_free(store: Store, wanted: int) -> None:
    """Add single-slot nodes until Ready nodes have ``wanted`` free slots."""
    nodes = store.list_nodes()
    missing = wanted - room(nodes, free_of(nodes, store.slots_in_use()))
    names = {node.name for node in nodes}
    added: list[NodeRecord] = []
    index = len(nodes)
    while len(added) < missing:
        if f"node-{index}" not in names:
            added.append(NodeRecord(f"node-{index}", 1))
        index += 1
    store.add_nodes(added)
