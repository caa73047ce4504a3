"""The operator at scale on the kwok test cluster: N nodes, J jobs of P pods -> all Running; then a fault
that hits many jobs at once (a tenth of the nodes go NotReady) -> every lost pod replaced elsewhere.

    python benchmarks/k8s_scale.py [--nodes 1000] [--jobs 500] [--pods 8] [--fail-fraction 0.1] [--workers 4]

Starts its own cluster with scripts/k8s-testcluster (named ``bench``; stopped at the end unless --keep) and
runs the operator in this process. The last line printed is one JSON object with the times in seconds:
submit -> all Running, fault -> all replaced; the process's peak resident memory (the operator's caches are
most of it); and the operator's reconciles, each timed (how many, mean and 95th percentile in ms, for the
submit and the fault phases). ``benchmarks/against.py --same-script`` measures each commit's operator with this
script: ``$TRAINGUARD_UNDER_TEST`` names the ``src`` whose trainguard is imported.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _kwok import kwok_node, not_ready_patch
from _results import ENV_UNDER_TEST

if os.environ.get(ENV_UNDER_TEST):
    sys.path.insert(0, os.environ[ENV_UNDER_TEST])

from trainguard.api.crd import native_crd
from trainguard.backends.k8s.client import ApiError, Kube
from trainguard.backends.k8s.kinds import NATIVE
from trainguard.backends.k8s.manifests import PodSettings
from trainguard.backends.k8s.operator import Operator, Options

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
SCRIPT = ROOT / "scripts" / "k8s-testcluster"


def job(name: str, pods: int) -> dict[str, Any]:
    return {
        "apiVersion": "trainguard.io/v1",
        "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicaSpecs": {
                "worker": {
                    "replicas": pods,
                    "restartPolicy": "OnNodeFailWithExitCode",
                    "restartLimit": 100,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "main", "image": "example.invalid/t:1", "command": ["sleep", "inf"]}
                            ]
                        }
                    },
                }
            }
        },
    }


def cluster(keep: bool) -> str:
    env = {**os.environ, "TRAINGUARD_K8S_CLUSTER": "bench"}
    out = subprocess.run([str(SCRIPT), "up"], env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
    return out.strip().removeprefix("export KUBECONFIG=")


def down() -> None:
    env = {**os.environ, "TRAINGUARD_K8S_CLUSTER": "bench"}
    subprocess.run([str(SCRIPT), "down"], env=env, check=False)


def create_all(kube: Kube, path: str, bodies: list[dict[str, Any]]) -> None:
    def create(body: dict[str, Any]) -> None:
        try:
            kube.create(path, body)
        except ApiError as error:
            if error.status != 409:
                raise

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, bodies))


def jobs_running(operator: Operator, pods: int) -> tuple[int, int]:
    """Jobs Running with all their pods, and the restarts counted, as the operator's watch of the jobs shows
    them: free to read, where listing 500 jobs with their statuses every few seconds would load the very API
    server being measured."""
    listed = operator.jobs[NATIVE.kind].items()
    running = sum(
        1
        for j in listed
        if (j.get("status") or {}).get("phase") == "Running"
        and sum(1 for p in j["status"].get("pods", []) if p["phase"] == "Running") == pods
    )
    restarts = sum(sum((j.get("status") or {}).get("restartCounts", {}).values()) for j in listed)
    return running, restarts


class Reconciles:
    """Times every reconcile of an operator (its ``reconcile``, wrapped on the instance), phase by phase."""

    def __init__(self, operator: Operator) -> None:
        self.lock = threading.Lock()
        self.seconds: list[float] = []
        original = operator.reconcile

        def timed(key: Any) -> None:
            started = time.perf_counter()
            try:
                original(key)
            finally:
                took = time.perf_counter() - started
                with self.lock:
                    self.seconds.append(took)

        operator.reconcile = timed  # type: ignore[method-assign]

    def take(self) -> dict[str, float]:
        """How many reconciles since the last take, their total in seconds, mean and 95th percentile in ms.
        The total is what compares: when reconciles take longer, the queue folds more changes of a job into
        one (fewer, longer reconciles), so the count and the mean move together, against each other."""
        with self.lock:
            taken, self.seconds = self.seconds, []
        if not taken:
            return {"count": 0, "total_s": 0.0, "mean_ms": 0.0, "p95_ms": 0.0}
        p95 = statistics.quantiles(taken, n=20)[-1] if len(taken) > 1 else taken[0]
        return {
            "count": len(taken),
            "total_s": round(sum(taken), 2),
            "mean_ms": round(1000 * statistics.fmean(taken), 2),
            "p95_ms": round(1000 * p95, 2),
        }


def wait_until(what: str, check: Any, timeout: float, progress: Any = None) -> float:
    started = last = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        if progress is not None and time.monotonic() - last >= 30:
            last = time.monotonic()
            print(f"  {time.monotonic() - started:6.0f} s: {progress()}", file=sys.stderr, flush=True)
        time.sleep(0.5)
    raise SystemExit(f"not {what} within {timeout:g} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--fail-fraction", type=float, default=0.1)
    parser.add_argument(
        "--workers",
        type=int,
        default=Options().workers,
        help=f"jobs the operator reconciles at once (its own default: {Options().workers})",
    )
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    kubeconfig = cluster(args.keep)
    kube = Kube(kubeconfig)
    try:
        create_all(kube, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", [native_crd()])
        create_all(
            kube,
            "/api/v1/namespaces",
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}],
        )
        # Room for every pod twice over, so that the replacements find a place.
        per_node = max(2, -(-2 * args.jobs * args.pods // args.nodes))
        names = [f"bench-node-{i}" for i in range(args.nodes)]
        create_all(kube, "/api/v1/nodes", [kwok_node(n, per_node, group="bench") for n in names])
        time.sleep(2)
        operator = Operator(
            kube,
            Options(
                namespace=NAMESPACE,
                kinds=(NATIVE,),
                pod_settings=PodSettings(scheduler="default-scheduler"),
                lease_namespace=NAMESPACE,
                workers=args.workers,
            ),
        )
        reconciles = Reconciles(operator)
        operator.start()
        wait_until("operator leading", lambda: operator.leader.is_leader() and operator.synced(), 60)
        reconciles.take()

        submitted = time.monotonic()
        create_all(
            kube,
            f"/apis/trainguard.io/v1/namespaces/{NAMESPACE}/trainingjobs",
            [job(f"job-{i}", args.pods) for i in range(args.jobs)],
        )

        def progress() -> str:
            phases: dict[str, int] = {}
            for pod in operator.pods.items():
                phase = pod.get("status", {}).get("phase", "?")
                phases[phase] = phases.get(phase, 0) + 1
            return f"jobs Running {jobs_running(operator, args.pods)[0]}/{args.jobs}, pods {phases}"

        all_running = wait_until(
            "all jobs Running",
            lambda: jobs_running(operator, args.pods)[0] == args.jobs,
            args.timeout,
            progress,
        )
        submit_seconds = time.monotonic() - submitted
        print(
            f"submit -> all Running: {submit_seconds:.1f} s ({all_running:.1f} s of waiting)", file=sys.stderr
        )

        submit_reconciles = reconciles.take()
        pods = operator.pods.items()
        failed = set(names[: max(1, int(args.nodes * args.fail_fraction))])
        hit = [p for p in pods if p["spec"].get("nodeName") in failed]
        hit_jobs = {p["metadata"]["labels"]["trainguard.io/job"] for p in hit}
        _, restarts_before = jobs_running(operator, args.pods)
        faulted = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: kube.patch(f"/api/v1/nodes/{n}", not_ready_patch()), sorted(failed)))

        def recovered() -> bool:
            running, restarts = jobs_running(operator, args.pods)
            return running == args.jobs and restarts - restarts_before >= len(hit)

        wait_until("all lost pods replaced", recovered, args.timeout, progress)
        fault_seconds = time.monotonic() - faulted
        fault_reconciles = reconciles.take()
        operator.stop()
        result = {
            "nodes": args.nodes,
            "jobs": args.jobs,
            "pods_per_job": args.pods,
            "workers": args.workers,
            "submit_to_all_running_s": round(submit_seconds, 1),
            "failed_nodes": len(failed),
            "pods_lost": len(hit),
            "jobs_hit": len(hit_jobs),
            "fault_to_all_replaced_s": round(fault_seconds, 1),
            # ru_maxrss is in KiB on Linux.
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "reconciles_submit": submit_reconciles,
            "reconciles_fault": fault_reconciles,
        }
        print(json.dumps(result))
    finally:
        kube.close()
        if not args.keep:
            down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
