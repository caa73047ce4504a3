"""Nudging the survivors of a torchrun job on Kubernetes after one of its pods failed.

The local runtime SIGKILLs the survivors' workers itself (``backends/local/nudge.py`` says why that helps: a
machine that vanished resets none of its peers' connections, and they would wait in a collective for its
timeout). The operator cannot reach processes on other nodes, so it tells each survivor's agent instead: it
sets the pod's ``trainguard.io/nudge`` annotation to ``<pod>#<history seq> <fault time>``, kubelet projects
the annotation into the file that the agent polls (``--nudge-file``, a downwardAPI volume), and the agent
SIGKILLs its workers started before that time; torchrun's agent restarts them into a new round.

Everything is derived from the job's status history and the pods' annotations, so an operator that restarts
(or a new leader) neither forgets a failure nor nudges one twice. A failure is nudged once it is
``NUDGE_AFTER_SECONDS`` old (survivors usually re-form on their own within a second or two) and no longer
after ``FORGET_AFTER_SECONDS``; a pod is nudged when it runs, is not the failed pod, was created before the
failure and does not carry the token yet. Only the latest such failure is sent: the agent kills every worker
older than its time, which covers the earlier ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.k8s.manifests import ANNOTATION_NUDGE
from trainguard.backends.k8s.observe import parse_time
from trainguard.controller.launch import torchrun_roles
from trainguard.controller.status import HistoryEntry

Obj = dict[str, Any]

#: As on the local runtime: survivors normally re-form within a second or two on their own.
NUDGE_AFTER_SECONDS = 5.0
#: A failure older than this is not nudged any more (a survivor that still waits has other trouble).
FORGET_AFTER_SECONDS = 600.0
#: The faults after which peers may be left waiting: the pod is gone or its process ended badly.
NUDGED_FAULTS = frozenset({"Exited", "OOMKilled", "NodeNotReady", "PodForceDeleted"})


@dataclass(frozen=True)
class Nudge:
    """What to send: ``pods`` get ``token`` (``<pod>#<seq> <time>``) in their nudge annotation."""

    failed_pod: str
    token: str
    pods: tuple[str, ...]


def failure_token(entry: HistoryEntry) -> str:
    """The annotation's value for a failure: the agent's nudge file format, ``<token> <unix time>``."""
    return f"{entry.pod}#{entry.seq} {entry.at:.3f}"


def plan(
    job: TrainingJob, history: Sequence[HistoryEntry], pods: Iterable[Obj], now: float
) -> tuple[Nudge | None, float | None]:
    """The nudge due now (if any), and when to look again for a failure not yet old enough (if any)."""
    roles = torchrun_roles(job)
    if not roles:
        return None, None
    prefixes = {f"{job.name}-{role}" for role in roles}
    failures = [
        entry
        for entry in history
        if entry.kind == "fault"
        and entry.fault in NUDGED_FAULTS
        and not (entry.fault == "Exited" and entry.exit_code == 0)
        and entry.pod is not None
        and entry.pod.rpartition("-")[0] in prefixes
        and now < entry.at + FORGET_AFTER_SECONDS
    ]
    waiting = [entry.at + NUDGE_AFTER_SECONDS for entry in failures if now < entry.at + NUDGE_AFTER_SECONDS]
    wake = min(waiting, default=None)
    due = [entry for entry in failures if now >= entry.at + NUDGE_AFTER_SECONDS]
    if not due:
        return None, wake
    latest = max(due, key=lambda entry: (entry.at, entry.seq))
    token = failure_token(latest)
    targets = tuple(
        sorted(
            pod["metadata"]["name"]
            for pod in pods
            if _survivor(pod, prefixes, latest) and _annotation(pod) != token
        )
    )
    return (Nudge(str(latest.pod), token, targets) if targets else None), wake


def _survivor(pod: Obj, prefixes: set[str], failure: HistoryEntry) -> bool:
    meta, status = pod["metadata"], pod.get("status") or {}
    created = parse_time(meta.get("creationTimestamp"))
    return (
        meta["name"] != failure.pod
        and meta["name"].rpartition("-")[0] in prefixes
        and status.get("phase") == "Running"
        and not meta.get("deletionTimestamp")
        and created is not None
        and created < failure.at
    )


def _annotation(pod: Obj) -> str | None:
    value = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_NUDGE)
    return value if isinstance(value, str) else None
