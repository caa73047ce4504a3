"""One operator's run in ``k8s_peers.py``: the sizes of the cluster, the jobs and the faults (``Size``), and
the run itself (``run_one``): its jobs submitted, then each fault in turn, with the seconds until the jobs have
their pods again, and the operator's CPU and memory at the end."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

from _kwok import exit_code_patch, not_ready_patch
from _peer_cluster import (
    PODS,
    Obj,
    clean,
    create,
    delete,
    fresh_nodes,
    in_parallel,
    install_crds,
    say,
    wait_for,
    without_hold,
)
from _peer_operators import Operator, first_write, running
from _peers import (
    DEFAULT_EVICTION_RATE,
    HOLD_FINALIZER,
    NODE_TAINTS,
    Pod,
    busiest,
    eviction_window,
    job_names,
    missing,
    role_pods,
    targets,
    terminating,
)
from _submit_trace import SubmitTrace

from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import ApiError, Kube

#: Pods each node takes beyond twice the jobs' pods (trainguard's rendezvous pods, scaled-out workers).
SPARE_PODS = 4
#: Each run's nodes are named anew (peer-<run>-node-<i>): nothing of an earlier run's nodes is reused.
_RUN_SERIAL = itertools.count(1)


@dataclass
class Size:
    nodes: int
    jobs: int
    pods: int
    #: The NotReady taints' toleration in every job's pods (None: the API server's default, 300 s).
    toleration_s: int | None
    #: Seconds a deleted pod stays Terminating before it is force-deleted.
    hold_s: float
    #: Seconds to wait after a node loss (None: from the toleration and the eviction rate).
    window_s: float | None = None
    fraction: float = 0.1
    scale_by: int = 2

    @property
    def nodes_down(self) -> int:
        return max(1, math.ceil(self.nodes * self.fraction))

    @property
    def node_window_s(self) -> float:
        if self.window_s is not None:
            return self.window_s
        toleration = 300 if self.toleration_s is None else self.toleration_s
        return eviction_window(toleration, self.nodes_down, DEFAULT_EVICTION_RATE)

    @property
    def fault_window_s(self) -> float:
        """How long the other faults may take: as long as the jobs' submission may, at least 120 s."""
        return max(120.0, 2.0 * self.jobs * self.pods / 5)


def run_one(kube: Kube, operator: Operator, size: Size, logs: Path, trace: SubmitTrace | None = None) -> Obj:
    """One operator's run; with ``trace``, its submit is traced (``_submit_trace``) into the figures'
    ``submit_trace``."""
    name = operator.name
    say(f"{name}: fresh nodes, its CRDs")
    serial = next(_RUN_SERIAL)
    nodes = [f"peer-{serial}-node-{i}" for i in range(size.nodes)]
    # Room for every pod twice over and some, so that replacements find a place.
    per_node = max(4, math.ceil(2 * size.jobs * (size.pods + size.scale_by + 1) / size.nodes) + SPARE_PODS)
    fresh_nodes(kube, nodes, per_node)
    install_crds(kube, operator.crds)
    figures: Obj = {"crd_first_write_s": first_write(kube, operator)}
    cache = Cache(kube, PODS, trace.seen if trace is not None else lambda new, old: None)
    cache.start()
    jobs = job_names(size.jobs)
    expected = dict.fromkeys(jobs, size.pods)
    hit = targets(jobs, size.fraction)

    def pods() -> list[Pod]:
        return role_pods(cache.items())

    def short(down: frozenset[str] = frozenset()) -> int:
        return missing(pods(), expected, down)

    def progress(down: frozenset[str] = frozenset()) -> str:
        return f"{short(down)} pods short"

    try:
        with running(kube, operator, logs):
            # 1. submit
            say(f"{name}: submitting {size.jobs} jobs of {size.pods} pods")
            if trace is not None:
                trace.start()
            submitted = time.monotonic()
            in_parallel(
                lambda i: create(
                    kube, operator.jobs_path, operator.job(jobs[i], i, size.pods, size.toleration_s)
                ),
                list(range(size.jobs)),
            )
            if wait_for("all Running", lambda: short() == 0, 1800, progress) is None:
                raise SystemExit(f"{name}: the jobs never all ran")
            figures["all_running_s"] = round(time.monotonic() - submitted, 2)
            if trace is not None:
                figures["submit_trace"] = trace.finish()

            # 2. a retryable exit code
            by_name = {p.name: p for p in pods()}
            failed = [by_name[f"{job}-worker-0"] for job in hit.exit_code]
            old = {p.uid for p in failed}
            say(f"{name}: exit code 137 in {len(failed)} pods")
            faulted = time.monotonic()
            in_parallel(lambda p: kube.patch(f"{PODS}/{p.name}", exit_code_patch(137)), failed)

            def replaced() -> bool:
                return short() == 0 and not any(p.uid in old for p in pods())

            took = wait_for("back after the exit codes", replaced, size.fault_window_s, progress)
            figures["back_after_exit_codes_s"] = (
                None if took is None else round(time.monotonic() - faulted, 2)
            )
            figures["pods_not_back_after_exit_codes"] = short()

            # 3. stuck Terminating, then force-deleted
            figures.update(force_delete(kube, cache, hit.force_deleted, expected, size, name))

            # 4. elastic scale-out
            figures.update(scale_out(kube, operator, cache, hit.scaled, jobs, expected, size))

            # 5. the busiest tenth of the nodes NotReady
            down = frozenset(busiest(nodes, pods(), size.nodes_down))
            lost = [p for p in pods() if p.node in down]
            window = size.node_window_s
            say(f"{name}: {len(down)} nodes NotReady, {len(lost)} pods on them, window {window:g} s")
            faulted = time.monotonic()
            in_parallel(lambda n: kube.patch(f"/api/v1/nodes/{n}", not_ready_patch()), sorted(down))
            lost_uids = {p.uid for p in lost}
            # When the last of the lost pods was deleted (by Kubernetes' eviction or by the operator): what
            # came after is the operator's own time.
            deleted: list[float] = []
            # When the last of the nodes got the NoExecute taint that evicts (kube-controller-manager's pace).
            tainted: list[float] = []
            untainted = set(down)

            def back() -> bool:
                if untainted:
                    untainted.difference_update(n for n in list(untainted) if evicting(kube, n))
                    if not untainted:
                        tainted.append(time.monotonic() - faulted)
                if not deleted and not lost_uids & {p.uid for p in pods()}:
                    deleted.append(time.monotonic() - faulted)
                return short(down) == 0

            # Each look asks the API server for the nodes' taints: a quarter of a second is enough for a figure
            # of seconds to minutes, and keeps those requests off the server while the peers wait for eviction.
            took = wait_for("back after the node loss", back, window, lambda: progress(down), poll=0.25)
            figures["pods_lost_with_nodes"] = len(lost)
            figures["nodes_tainted_s"] = round(tainted[0], 1) if tainted else None
            figures["lost_pods_deleted_s"] = round(deleted[0], 1) if deleted else None
            figures["back_after_node_loss_s"] = None if took is None else round(time.monotonic() - faulted, 1)
            figures["pods_not_back_after_window"] = short(down)
            figures["pods_terminating_at_the_end"] = len(terminating(cache.items()))
            figures["node_window_s"] = window

            cpu, peak = operator.processes[0].usage()
            figures["cpu_s"] = round(cpu, 1)
            figures["peak_memory_mib"] = round(peak, 1)
            for helper in operator.processes[1:]:
                cpu, peak = helper.usage()
                figures[f"{helper.name}_cpu_s"] = round(cpu, 1)
                figures[f"{helper.name}_peak_memory_mib"] = round(peak, 1)
    finally:
        cache.stop()
        say(f"{name}: cleaning up")
        clean(kube, operator.crds)
    say(f"{name}: {json.dumps(figures)}")
    return figures


def evicting(kube: Kube, node: str) -> bool:
    """The node carries a NoExecute taint of a NotReady or unreachable node."""
    taints = (kube.get(f"/api/v1/nodes/{node}").get("spec") or {}).get("taints") or []
    return any(t.get("effect") == "NoExecute" and t.get("key") in NODE_TAINTS for t in taints)


def force_delete(
    kube: Kube, cache: Cache, jobs: list[str], expected: dict[str, int], size: Size, name: str
) -> Obj:
    """A Worker of each job deleted and held Terminating for ``size.hold_s``, then force-deleted: how many of
    the jobs were whole again before the force-deletion, and the time from it until all are."""
    held = [f"{job}-worker-0" for job in jobs]
    want = {job: expected[job] for job in jobs}
    say(f"{name}: {len(held)} pods stuck Terminating for {size.hold_s:g} s, then force-deleted")
    # The held incarnations, by uid: once one is gone its operator may create the next under the same name
    # before this loop reaches it, and that one is neither let go nor deleted here.
    uids = {pod: kube.patch(f"{PODS}/{pod}", {"metadata": {"finalizers": [HOLD_FINALIZER]}})["metadata"]["uid"]
            for pod in held}  # fmt: skip
    in_parallel(lambda p: delete(kube, f"{PODS}/{p}", uid=uids[p]), held)
    time.sleep(size.hold_s)
    current = role_pods(cache.items())
    whole_before = sum(1 for job in jobs if missing(current, {job: want[job]}) == 0)

    def force(pod: str) -> None:
        with contextlib.suppress(ApiError):
            now = kube.get(f"{PODS}/{pod}")
            if now["metadata"]["uid"] == uids[pod]:
                kube.patch(f"{PODS}/{pod}", without_hold(now))
        delete(kube, f"{PODS}/{pod}", grace=0, uid=uids[pod])

    # All at once, as the exit codes: one after the other, the figure held this loop's own fifteen round trips
    # (0.11-0.22 s at 100 nodes, slower the busier the API server), more than the operators' part.
    forced = time.monotonic()
    in_parallel(force, held)

    def back() -> bool:
        return missing(role_pods(cache.items()), want) == 0

    took = wait_for(
        "back after the force-deletion",
        back,
        size.fault_window_s,
        lambda: f"{missing(role_pods(cache.items()), want)} pods short",
    )
    return {
        "jobs_whole_while_terminating": whole_before,
        "back_after_force_delete_s": None if took is None else round(time.monotonic() - forced, 2),
        "pods_not_back_after_force_delete": missing(role_pods(cache.items()), want),
    }


def scale_out(
    kube: Kube,
    operator: Operator,
    cache: Cache,
    scaled: list[str],
    jobs: list[str],
    expected: dict[str, int],
    size: Size,
) -> Obj:
    """The Worker replicas of ``scaled`` raised by ``size.scale_by``: the time until the new pods are Running
    (``expected`` then counts them)."""
    say(f"{operator.name}: {len(scaled)} jobs scaled out by {size.scale_by} workers")
    started = time.monotonic()
    for job in scaled:
        workers = operator.workers(size.pods, jobs.index(job))
        try:
            operator.scale(kube, job, workers + size.scale_by)
        except ApiError as error:
            say(f"{operator.name}: scaling {job} refused: {error}")
            return {"scaled_running_s": None, "scale_refused": str(error)}
        expected[job] = size.pods + size.scale_by
    want = {job: expected[job] for job in scaled}
    took = wait_for(
        "scaled out",
        lambda: missing(role_pods(cache.items()), want) == 0,
        size.fault_window_s,
        lambda: f"{missing(role_pods(cache.items()), want)} pods short",
    )
    return {
        "scaled_running_s": None if took is None else round(time.monotonic() - started, 2),
        "pods_not_up_after_scale": missing(role_pods(cache.items()), want),
    }
