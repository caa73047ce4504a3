"""How the controller's work and the Kubernetes status grow with the pods of one job: the figures behind the
operator's limit (``trainguard.backends.k8s.held.MAX_JOB_PODS``).

    python benchmarks/job_size.py [--pods 250 500 1000 2000 4000 8000] [--steady 3] [--faults 500]
                                  [--name pretrain-llama-70b] [--results DIR]

For each size N: one job of N worker pods on the simulated cluster (``trainguard.backends.sim``: N nodes, pods
run as soon as they are created, no network), reconciled by the pure controller as the operator does it
(``trainguard.controller.reconcile`` with the operator's memory of settled slots, then the backend applies
the actions). It times, in seconds:

- ``first``: the first reconcile (every pod slot created, every pod launched);
- ``second``: the next one (every pod seen Running; the job becomes Running);
- ``steady``: ``--steady`` more with nothing new (a resync of a healthy job);

and the size of the job's status as the operator writes it once every pod runs (``status_document``):
``status_bytes`` as the operator sends it (``json.dumps``), ``status_compact_bytes`` as the API server keeps
it in etcd (no spaces), and ``status_encode``, the seconds to build and encode it.

Then the job wears: ``--faults`` pods (default: as many as the history keeps, at most N) exit with code 1 at
once and are restarted, so the history, the issued keys and the policy's counters fill up as in a job that has
run for weeks. ``fault`` is the reconcile that sees them; ``worn_status_bytes`` and
``worn_status_compact_bytes`` the status once every pod runs again (near the largest the job's status grows
to: the history and the issued keys are capped and now full, the pods' slots are not).

Each reconcile is timed alone: the simulated cluster's own work is not in it, nor the API server's. The job's
name is as long as a real one (``--name``), since every pod's name is in the status.

``--results DIR`` also keeps the JSON there with the commit and the machine (``_results.keep``). The last
line printed is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from typing import Any

from _results import keep, machine

from trainguard.api import TrainingJob
from trainguard.backends.k8s.kinds import NATIVE
from trainguard.backends.k8s.status import status_document
from trainguard.backends.sim.clock import VirtualClock
from trainguard.backends.sim.cluster import SimCluster
from trainguard.backends.sim.pods import GPU_POOL
from trainguard.controller import JobPhase, JobStatus, SettledSlots, reconcile
from trainguard.controller.status import MAX_HISTORY

SIZES = (250, 500, 1000, 2000, 4000, 8000)
#: Nodes beyond one per pod, for restarted pods to go to.
SPARE_NODES = 8


def job(name: str, pods: int) -> TrainingJob:
    worker = {
        "replicas": pods,
        "restartPolicy": "OnFailure",
        "template": {"spec": {"containers": [{"name": "main", "image": "train:1", "command": ["python"]}]}},
    }
    return TrainingJob.model_validate(
        {
            "apiVersion": "trainguard.io/v1",
            "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicaSpecs": {"worker": worker}},
        }
    )


class Run:
    """One job on its simulated cluster, reconciled as the operator does it."""

    def __init__(self, model: TrainingJob, nodes: int) -> None:
        self.model = model
        self.clock = VirtualClock(1_000.0)
        self.cluster = SimCluster.build(self.clock, {GPU_POOL: nodes})
        self.settled = SettledSlots()
        self.status = JobStatus()

    def reconcile(self, seconds: float = 1.0) -> float:
        """One reconcile ``seconds`` after the last; returns how long the controller took."""
        self.clock.advance_to(self.clock.now + seconds)
        observed = self.cluster.observe(self.model)
        started = time.perf_counter()
        result = reconcile(self.model, self.status, observed, self.clock.now, self.settled)
        took = round(time.perf_counter() - started, 4)
        self.cluster.apply(self.model, result.actions)
        self.status = self.cluster.stored or self.status
        return took

    def document(self, compact: bool = False) -> bytes:
        separators = (",", ":") if compact else None
        return json.dumps(status_document(NATIVE, self.model, self.status), separators=separators).encode()


def measure(name: str, pods: int, steady: int, faults: int) -> dict[str, Any]:
    run = Run(job(name, pods), nodes=pods + SPARE_NODES)
    times = [run.reconcile() for _ in range(2 + steady)]
    started = time.perf_counter()
    sent = run.document()
    encode = round(time.perf_counter() - started, 4)
    compact = run.document(compact=True)
    running = run.status.phase is JobPhase.RUNNING
    hit = min(faults, pods)
    for index in range(hit):
        run.cluster.exit(f"{name}-worker-{index * pods // hit}", 1)
    fault = run.reconcile()
    for _ in range(20):  # restarts back off for a few seconds
        run.reconcile(seconds=5.0)
        if run.status.phase is JobPhase.RUNNING:
            break
    worn, worn_compact = run.document(), run.document(compact=True)
    return {
        "pods": pods,
        "all_running": running,
        "first": times[0],
        "second": times[1],
        "steady": times[2:],
        "status_bytes": len(sent),
        "status_compact_bytes": len(compact),
        "status_bytes_per_pod": round(len(sent) / pods),
        "status_encode": encode,
        "faults": hit,
        "fault": fault,
        "history": len(run.status.history),
        "issued_keys": len(run.status.issued_keys),
        "worn_running": run.status.phase is JobPhase.RUNNING,
        "worn_status_bytes": len(worn),
        "worn_status_compact_bytes": len(worn_compact),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--steady", type=int, default=3)
    parser.add_argument("--faults", type=int, default=MAX_HISTORY)
    parser.add_argument("--name", default="pretrain-llama-70b", help="the job's name (default: %(default)s)")
    parser.add_argument(
        "--results", default=None, help="also keep the JSON in this directory (benchmarks/results)"
    )
    args = parser.parse_args()
    runs = []
    for pods in args.pods:
        gc.collect()
        run = measure(args.name, pods, args.steady, args.faults)
        print(
            f"{pods:>6} pods: first {run['first']:.3f} s, second {run['second']:.3f} s, "
            f"steady {max(run['steady'], default=0):.3f} s, fault {run['fault']:.3f} s, "
            f"status {run['status_bytes'] / 1e6:.2f} MB, worn {run['worn_status_bytes'] / 1e6:.2f} MB",
            file=sys.stderr,
        )
        runs.append(run)
    results: dict[str, Any] = {"name": args.name, "runs": runs, "machine": machine()}
    if args.results:
        keep("job_size", results, args.results)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
