"""The controller's backend interface (``trainguard.controller.backend``) over the Kubernetes API, for one job.

``observe`` reads the watched caches (pods of the job, all nodes); ``apply`` writes to the API server through
the one applier, with the operator's verbs (``trainguard.backends.k8s.verbs``, which says how each stays
idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from trainguard.api import TrainingJob
from trainguard.backends.k8s import metadata, services
from trainguard.backends.k8s.kinds import JobKind
from trainguard.backends.k8s.observe import is_ours, observed_pod
from trainguard.backends.k8s.shared import Shared, owned_by
from trainguard.backends.k8s.store_pod import StorePod
from trainguard.backends.k8s.verbs import OperatorVerbs
from trainguard.controller.apply import apply_actions
from trainguard.controller.backend import (
    Action,
    Applied,
    Observed,
    ReleaseMode,
)
from trainguard.controller.status import JobStatus

Obj = dict[str, Any]
log = logging.getLogger(__name__)


class JobBackend:
    """One job's view and hands, for one reconcile (``obj`` is the custom resource as read)."""

    def __init__(self, shared: Shared, kind: JobKind, obj: Obj) -> None:
        self.shared = shared
        self.kube = shared.kube
        self.kind = kind
        self.obj = obj
        self.namespace = obj["metadata"]["namespace"]
        self.name = obj["metadata"]["name"]
        self.written: JobStatus | None = None
        self.store_pod = StorePod(shared, kind, self.namespace, self.name)

    # ---- observe -----------------------------------------------------------------------------------

    def observe(self, job: TrainingJob) -> Observed:
        pods = [
            p
            for p in self.shared.pods.select(self.namespace, {metadata.LABEL_JOB: job.name})
            if is_ours(p) and owned_by(p, job.metadata.uid)
        ]
        seen = [observed_pod(p) for p in pods]
        names = {p.name for p in seen}
        # A vanished pod's last view is shown until the controller has moved its slot past that incarnation.
        decided = {
            p.get("name"): p.get("generation", 1) for p in (self.obj.get("status") or {}).get("pods", [])
        }
        # This job's own (by uid): another job's pods are never its business, whatever their names.
        uid = job.metadata.uid or ""
        with self.shared.lock:
            tombs = self.shared.tombstones.get(uid, {})
            for name, tomb in list(tombs.items()):
                if decided.get(name, 1) > tomb.generation:
                    del tombs[name]
                elif name not in names:
                    seen.append(tomb)
            if not tombs:
                self.shared.tombstones.pop(uid, None)
        with self.shared.lock:
            log_ = self.shared.errors.get((self.namespace, self.name))
            errors = log_.errors() if log_ is not None else ()
        node_count, isolated = self.shared.isolated_nodes()
        return Observed(
            pods=tuple(sorted(seen, key=lambda p: p.name)),
            nodes=self.shared.observed_nodes(),
            errors=errors,
            network=services.network(job),
            release=ReleaseMode.ON if self.shared.settings.release_survivors else ReleaseMode.OFF,
            node_count=node_count,
            isolated_nodes=isolated,
            isolation=self.shared.settings.isolation,
            fencing=self.shared.settings.fencing if self.shared.settings.report_url else None,
        )

    # ---- apply: the one applier (``trainguard.controller.apply``) with this backend's verbs ----------

    def apply(self, job: TrainingJob, actions: Sequence[Action]) -> Applied:
        """Between two status writes, the actions on different pods (and every event) go out side by side,
        the actions on one pod one after the other; a status conflict stops the batch."""
        return apply_actions(OperatorVerbs(self, job), actions)
