"""The pure parts of ``k8s_peers.py``: the jobs each operator is given, what the benchmark reads from the watched
pods, the operators' settings as flags, the node-loss window, and the figures of repeated runs (medians, ranges,
ratios). Nothing here talks to a cluster or reads a clock, so ``tests/unit/benchmarks`` checks it as it is.

The benchmark imports it as ``_peers`` (its own directory is on the path), the tests as ``benchmarks._peers``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.backends.k8s.operator import Options
from trainguard.backends.k8s.shared import APPLY_CONCURRENCY

Obj = dict[str, Any]

NAMESPACE = "peers"
#: The pods of a job's roles, as the three operators name them: ``<job>-<role>-<index>`` (a rendezvous pod of
#: trainguard's, a Service or Volcano's own objects are not one).
POD_NAME = re.compile(r"^(?P<job>.+)-(?P<role>master|worker|launcher)-(?P<index>\d+)$")
#: The stand-in for a kubelet that never confirms a deletion (a NotReady node's): while a pod carries it, a
#: deleted pod stays Terminating, as in Kubeflow's issue #2072. Removing it is the force-deletion.
HOLD_FINALIZER = "trainguard.io/peers-hold"
#: The images and commands of Kubeflow's own examples (kwok pulls nothing and runs nothing).
SIMPLE_IMAGE = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
SIMPLE_COMMAND = ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]
ECHO_IMAGE = "ghcr.io/kubeflow/training-v1/pytorch-elastic-example-echo:latest"
ECHO_COMMAND = ["python", "-m", "torch.distributed.run", "--rdzv_backend=c10d", "./echo.py"]
#: Volcano's MPI example (a launcher that runs mpirun over ssh, workers running sshd), as CCE's Horovod job.
MPI_IMAGE = "volcanosh/example-mpi:0.0.3"
LAUNCHER_COMMAND = ["/bin/sh", "-c", "mkdir -p /var/run/sshd; /usr/sbin/sshd; mpiexec --allow-run-as-root"]
WORKER_COMMAND = ["/bin/sh", "-c", "mkdir -p /var/run/sshd; /usr/sbin/sshd -D"]
#: The taints a node's lifecycle controller puts on a NotReady or unreachable node, which evict the pods that do
#: not tolerate them (every pod tolerates them for 300 s unless its spec says otherwise).
NODE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
#: Kubernetes' defaults for evicting pods from NotReady nodes: kube-apiserver's
#: --default-not-ready-toleration-seconds and kube-controller-manager's --node-eviction-rate (nodes per second,
#: each zone; the first node at once).
DEFAULT_TOLERATION_S = 300
DEFAULT_EVICTION_RATE = 0.1
#: The events of a Volcano Job's pod that its policies replace the pod on: the pod failed, or it was deleted
#: (Volcano reads any deletion it did not ask for, a force-deletion or an eviction, as ``PodEvicted``).
VOLCANO_POD_EVENTS = ("PodFailed", "PodEvicted")


# ---- the jobs ----------------------------------------------------------------------------------------


def tolerations(seconds: int | None) -> list[Obj]:
    """What every job's pods carry: the eviction taints tolerated for ``seconds`` (None: nothing, the API
    server's default of 300 s applies), the same for every operator."""
    if seconds is None:
        return []
    return [
        {"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        for taint in NODE_TAINTS
    ]


def _pod_spec(image: str, command: list[str], toleration_s: int | None, name: str, restart: str) -> Obj:
    spec: Obj = {"containers": [{"name": name, "image": image, "command": command}]}
    if restart:
        spec["restartPolicy"] = restart
    if toleration_s is not None:
        spec["tolerations"] = tolerations(toleration_s)
    return spec


def pytorchjob(name: str, pods: int, elastic: bool, toleration_s: int | None = None) -> Obj:
    """Kubeflow's examples (simple.yaml: Master + Workers; elastic/echo: elastic Workers, room to double) at
    ``pods`` pods, with ``restartPolicy: ExitCode``: exit codes 128-255 are retried by recreating the pod."""

    def replicas(count: int, image: str, command: list[str]) -> Obj:
        return {
            "replicas": count,
            "restartPolicy": "ExitCode",
            "template": {"spec": _pod_spec(image, command, toleration_s, "pytorch", "")},
        }

    if elastic:
        spec: Obj = {
            "elasticPolicy": {
                "rdzvBackend": "c10d",
                "minReplicas": 1,
                "maxReplicas": 2 * pods,
                "maxRestarts": 100,
            },
            "pytorchReplicaSpecs": {"Worker": replicas(pods, ECHO_IMAGE, ECHO_COMMAND)},
        }
    else:
        spec = {
            "pytorchReplicaSpecs": {
                "Master": replicas(1, SIMPLE_IMAGE, SIMPLE_COMMAND),
                "Worker": replicas(pods - 1, SIMPLE_IMAGE, SIMPLE_COMMAND),
            }
        }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def volcano_job(name: str, pods: int, toleration_s: int | None = None) -> Obj:
    """Volcano's Job in the shape of CCE's Horovod example: a launcher and ``pods - 1`` workers (ssh and svc
    plugins, as Volcano's MPI example), gang-scheduled by vc-scheduler. Its policies act on the pod, as
    trainguard's rules and Kubeflow's ``restartPolicy: ExitCode`` do: a failed pod (``PodFailed``) and a pod
    deleted or evicted (``PodEvicted``) are each replaced alone (``RestartPod``, Volcano v1.14), up to 100
    times."""

    def task(task_name: str, count: int, command: list[str]) -> Obj:
        return {
            "name": task_name,
            "replicas": count,
            "template": {"spec": _pod_spec(MPI_IMAGE, command, toleration_s, task_name, "Never")},
        }

    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            # What Volcano's admission webhook would default (it is not run here).
            "schedulerName": "volcano",
            "queue": "default",
            "minAvailable": pods,
            "maxRetry": 100,
            "plugins": {"ssh": [], "svc": []},
            "policies": [{"event": event, "action": "RestartPod"} for event in VOLCANO_POD_EVENTS],
            "tasks": [
                task("launcher", 1, LAUNCHER_COMMAND),
                task("worker", pods - 1, WORKER_COMMAND),
            ],
        },
    }


def pytorchjob_scaled(workers: int) -> Obj:
    """A merge patch that sets a PyTorchJob's Worker replicas (what an autoscaler of an elastic job writes)."""
    return {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": workers}}}}


def volcano_scaled(job: Obj, workers: int) -> Obj:
    """``job`` (as read, with its resourceVersion) with its worker task at ``workers`` replicas: the whole
    object, for a replace, since a merge patch would replace the list of tasks."""
    spec = dict(job["spec"])
    spec["tasks"] = [{**t, "replicas": workers} if t["name"] == "worker" else t for t in spec["tasks"]]
    return {**job, "spec": spec}


def job_names(count: int) -> list[str]:
    return [f"job-{i}" for i in range(count)]


def elastic(index: int) -> bool:
    """Which of the PyTorchJobs take Kubeflow's elastic shape: every other one."""
    return index % 2 == 1


@dataclass(frozen=True)
class Targets:
    """Which jobs each fault hits: a tenth of them each (at least one), disjoint where the jobs allow it."""

    exit_code: list[str]
    force_deleted: list[str]
    scaled: list[str]


def targets(jobs: Sequence[str], fraction: float) -> Targets:
    count = max(1, math.ceil(len(jobs) * fraction))
    # Scaled: elastic ones (odd indices) from the end; force-deleted: even ones from the end; exit codes: the first.
    odd = [job for i, job in enumerate(jobs) if elastic(i)] or list(jobs)
    even = [job for i, job in enumerate(jobs) if not elastic(i)]
    return Targets(list(jobs[:count]), even[::-1][:count] or list(jobs[-count:]), odd[::-1][:count])


# ---- what the pods say -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    name: str
    job: str
    uid: str
    node: str
    running: bool
    terminating: bool


def role_pod(obj: Obj) -> Pod | None:
    """A watched pod as the benchmark reads it, or None for a pod that is not one of a job's roles."""
    meta = obj.get("metadata") or {}
    match = POD_NAME.match(meta.get("name", ""))
    if match is None:
        return None
    return Pod(
        name=meta["name"],
        job=match["job"],
        uid=meta.get("uid", ""),
        node=(obj.get("spec") or {}).get("nodeName", ""),
        running=(obj.get("status") or {}).get("phase") == "Running",
        terminating=bool(meta.get("deletionTimestamp")),
    )


def role_pods(objs: Iterable[Obj]) -> list[Pod]:
    """The jobs' role pods that are not being deleted."""
    return [pod for pod in map(role_pod, objs) if pod is not None and not pod.terminating]


def terminating(objs: Iterable[Obj]) -> list[Pod]:
    """The jobs' role pods that are being deleted (Terminating)."""
    return [pod for pod in map(role_pod, objs) if pod is not None and pod.terminating]


def missing(pods: Iterable[Pod], expected: Mapping[str, int], down: frozenset[str] = frozenset()) -> int:
    """How many pods the jobs lack to have ``expected[job]`` Running each, not being deleted, on nodes that are
    not ``down``."""
    running = Counter(p.job for p in pods if p.running and not p.terminating and p.node not in down)
    return sum(max(0, want - running[job]) for job, want in expected.items())


def busiest(nodes: Sequence[str], pods: Iterable[Pod], count: int) -> list[str]:
    """The ``count`` nodes that hold the most of the jobs' pods (then by name), so that every operator loses
    about as many pods with them, however its scheduler placed them."""
    held = Counter(p.node for p in pods)
    return sorted(nodes, key=lambda n: (-held[n], n))[:count]


# ---- the operators' settings -------------------------------------------------------------------------

#: The two ways each figure is measured: each operator as its manifests run it, and all with trainguard's
#: concurrency and client rates.
MODES = ("as_shipped", "equal")


@dataclass(frozen=True)
class Settings:
    """What an operator is given: jobs reconciled at once, its API client's rates (None: no client-side limit)
    and how many requests it may have in flight for its jobs at once, as its code bounds them."""

    #: Jobs reconciled at once (trainguard's ``--workers``, Kubeflow's ``--controller-threads``, Volcano's
    #: ``--worker-threads``).
    workers: int
    qps: float | None
    burst: int | None
    #: How one job's pods are created: ``side_by_side`` (many requests at once) or ``one_at_a_time``.
    job_pods: str
    #: The most API requests the operator can have in flight at once for its jobs (None: no bound of its own
    #: beyond ``workers`` x a job's pods).
    requests_in_flight: int | None
    #: Why this is what the operator is given (for the raw file and the write-up).
    why: str

    def as_json(self) -> Obj:
        return {
            "workers": self.workers,
            "client_qps": self.qps,
            "client_burst": self.burst,
            "job_pods": self.job_pods,
            "requests_in_flight": self.requests_in_flight,
            "why": self.why,
        }


SIDE_BY_SIDE = "side_by_side"
ONE_AT_A_TIME = "one_at_a_time"
#: The operator's own defaults (``trainguard operator`` without flags).
OPERATOR_DEFAULTS = Options()
#: trainguard's operator as it ships: ``--workers`` reconcile workers, which decide each job and write its
#: status, and one pool of ``APPLY_CONCURRENCY`` threads that sends the actions of every job (pods, Services,
#: Events), a job's pods side by side; all of them together hold at most ``--requests-in-flight`` requests out at
#: once (its client counts them). No client rate limiter. The same in both modes.
TRAINGUARD_WORKERS = OPERATOR_DEFAULTS.workers
TRAINGUARD_IN_FLIGHT = OPERATOR_DEFAULTS.requests_in_flight
TRAINGUARD = Settings(
    workers=TRAINGUARD_WORKERS,
    qps=None,
    burst=None,
    job_pods=SIDE_BY_SIDE,
    requests_in_flight=TRAINGUARD_IN_FLIGHT,
    why=f"its defaults: {TRAINGUARD_WORKERS} reconcile workers (each writes its job's status) and "
    f"{APPLY_CONCURRENCY} threads that send every job's pods, Services and Events, a job's pods side by side, at "
    f"most {TRAINGUARD_IN_FLIGHT} requests in flight from all of them together (--requests-in-flight); no client "
    "rate limit",
)
#: Kubeflow's training operator v1.9.3 as its manifests run it: its flags' defaults (1 controller thread,
#: 20 requests/s, bursts of 30).
KUBEFLOW = Settings(
    workers=1,
    qps=20,
    burst=30,
    job_pods=ONE_AT_A_TIME,
    requests_in_flight=1,
    why="its flags' defaults, which its manifests keep",
)
#: Kubeflow's operator with trainguard's means: its reconcile creates a job's pods one after another (a loop in
#: its ReconcilePods), so its only concurrency is its controller threads, each with one request in flight; it is
#: given as many threads as trainguard has requests in flight, and no client rate limit.
KUBEFLOW_EQUAL = Settings(
    workers=TRAINGUARD.requests_in_flight or 0,
    qps=None,
    burst=None,
    job_pods=ONE_AT_A_TIME,
    requests_in_flight=TRAINGUARD.requests_in_flight,
    why=f"its reconcile sends a job's requests one after another, so its controller threads bound its requests "
    f"in flight: {TRAINGUARD.requests_in_flight} threads, trainguard's bound on its requests in flight; no client "
    "rate limit, as trainguard",
)
#: Volcano's controller manager as its installer runs it (volcano-development.yaml): 3 job workers, 50 requests/s,
#: bursts of 100.
VOLCANO = Settings(
    workers=3,
    qps=50,
    burst=100,
    job_pods=SIDE_BY_SIDE,
    requests_in_flight=None,
    why="its installer's flags (volcano-development.yaml)",
)
#: Volcano's with trainguard's means: its job sync creates a job's pods side by side (a goroutine a pod), as
#: trainguard does, so it is given trainguard's number of workers, and no client rate limit.
VOLCANO_EQUAL = Settings(
    workers=TRAINGUARD_WORKERS,
    qps=None,
    burst=None,
    job_pods=SIDE_BY_SIDE,
    requests_in_flight=None,
    why=f"its job sync creates a job's pods side by side (a goroutine each), as trainguard's apply threads do: "
    f"trainguard's {TRAINGUARD_WORKERS} workers, each with a job's pods in flight at once, with no bound on "
    f"their sum (trainguard's is {TRAINGUARD.requests_in_flight}); no client rate limit, as trainguard",
)
#: What a client limit of "none" becomes for the peers, whose flags take a number: far above anything the API
#: server here answers.
UNLIMITED_QPS = 100_000.0
UNLIMITED_BURST = 100_000


def settings(peer: str, mode: str) -> Settings:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")
    table = {
        "trainguard": (TRAINGUARD, TRAINGUARD),
        "kubeflow": (KUBEFLOW, KUBEFLOW_EQUAL),
        "volcano": (VOLCANO, VOLCANO_EQUAL),
    }
    return table[peer][MODES.index(mode)]


def _rates(setting: Settings) -> tuple[str, str]:
    qps = UNLIMITED_QPS if setting.qps is None else setting.qps
    burst = UNLIMITED_BURST if setting.burst is None else setting.burst
    return f"{qps:g}", str(burst)


def kubeflow_flags(setting: Settings) -> list[str]:
    qps, burst = _rates(setting)
    return [
        "--controller-threads",
        str(setting.workers),
        "--kube-api-qps",
        qps,
        "--kube-api-burst",
        burst,
    ]


def volcano_flags(setting: Settings) -> list[str]:
    qps, burst = _rates(setting)
    return [f"--worker-threads={setting.workers}", f"--kube-api-qps={qps}", f"--kube-api-burst={burst}"]


# ---- the node-loss window ----------------------------------------------------------------------------


def eviction_window(
    toleration_s: float, nodes_down: int, eviction_rate: float = DEFAULT_EVICTION_RATE, margin_s: float = 90
) -> float:
    """Seconds within which Kubernetes' own eviction can be done with every pod of ``nodes_down`` NotReady
    nodes: the taints go on at ``eviction_rate`` nodes a second (the first at once), the pods are evicted
    ``toleration_s`` after their node's taint, and ``margin_s`` is for the operators to recreate them."""
    if eviction_rate <= 0:
        raise ValueError(f"eviction rate must be positive, not {eviction_rate}")
    if nodes_down < 0 or toleration_s < 0 or margin_s < 0:
        raise ValueError("nodes down, toleration and margin must not be negative")
    return toleration_s + max(0, nodes_down - 1) / eviction_rate + margin_s


# ---- the figures of repeated runs --------------------------------------------------------------------

#: The figures compared as trainguard's over a peer's.
COMPARED = (
    "all_running_s",
    "back_after_exit_codes_s",
    "back_after_force_delete_s",
    "scaled_running_s",
    "back_after_node_loss_s",
    "pods_not_back_after_window",
    "cpu_s",
    "peak_memory_mib",
)


def order(run: int, entries: Sequence[str]) -> list[str]:
    """The order of run ``run`` (0-based): the entries rotated by one each run, so that over as many runs as
    there are entries each takes every position once (a cyclic Latin square)."""
    if not entries:
        return []
    shift = run % len(entries)
    return [*entries[shift:], *entries[:shift]]


def positions(orders: Iterable[Sequence[str]]) -> dict[str, list[int]]:
    """Each entry's place (1-based) in each of the rounds' orders, in round order."""
    taken: dict[str, list[int]] = {}
    for whole in orders:
        for place, entry in enumerate(whole, start=1):
            taken.setdefault(entry, []).append(place)
    return taken


def every_position(taken: Mapping[str, Sequence[int]]) -> bool:
    """Whether each entry took every position of the rounds (1 to the number of entries) at least once."""
    every = set(range(1, len(taken) + 1))
    return bool(taken) and all(every <= set(places) for places in taken.values())


def rounds_to_take(
    first_run: int, runs: int, from_entry: int, entries: Sequence[str]
) -> list[tuple[int, list[str], list[str]]]:
    """What one invocation runs: for each of its ``runs`` rounds, numbered from ``first_run``, (the round's
    number, its whole order, the entries to run here). The first round starts at its ``from_entry``-th entry
    (1-based): an earlier invocation with the same ``--first-run`` took those before it, so that a round longer
    than a session can be taken in parts. ValueError where ``from_entry`` is not an entry of the round."""
    if first_run < 1:
        raise ValueError(f"--first-run is {first_run}: 1 or more")
    if not 1 <= from_entry <= max(len(entries), 1):
        raise ValueError(
            f"--from-entry is {from_entry}: a round here has {len(entries)} entries, 1 to {len(entries)}"
        )
    taken: list[tuple[int, list[str], list[str]]] = []
    for index, number in enumerate(range(first_run, first_run + runs)):
        whole = order(number - 1, entries)
        taken.append((number, whole, whole[from_entry - 1 :] if index == 0 else whole))
    return taken


def entries_of(run: Mapping[str, Any]) -> list[str]:
    """The entries a kept round holds: those its invocation ran (the whole order in files kept before rounds
    could be taken in parts)."""
    return list(run.get("entries", run.get("order", [])))


def _key(value: Any) -> float:
    """None (not within the window) sorts after every number."""
    return math.inf if value is None else float(value)


def median(values: Sequence[float | None]) -> float | None:
    """The median, None counted as longer than any time (a median that falls on one is None)."""
    if not values:
        return None
    ranked = sorted(values, key=_key)
    middle = len(ranked) // 2
    if len(ranked) % 2:
        return ranked[middle]
    low, high = ranked[middle - 1], ranked[middle]
    if low is None or high is None:
        return None
    return (low + high) / 2


def spread(values: Sequence[float | None]) -> list[float | None]:
    """[lowest, highest], None where a run did not get there."""
    if not values:
        return [None, None]
    ranked = sorted(values, key=_key)
    return [ranked[0], ranked[-1]]


def summarize(runs: Sequence[Mapping[str, Mapping[str, Obj]]]) -> tuple[Obj, Obj]:
    """Repeated runs' figures (each ``{peer: {mode: {figure: value}}}``) as (medians, ranges), same shape."""
    medians: Obj = {}
    ranges: Obj = {}
    for run in runs:
        for peer, modes in run.items():
            for mode, figures in modes.items():
                for figure in figures:
                    values = [r[peer][mode].get(figure) for r in runs if mode in r.get(peer, {})]
                    if not all(v is None or isinstance(v, (int, float)) for v in values):
                        continue
                    medians.setdefault(peer, {}).setdefault(mode, {})[figure] = median(values)
                    ranges.setdefault(peer, {}).setdefault(mode, {})[figure] = spread(values)
    return medians, ranges


def ratios(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> Obj:
    """trainguard's figure over the peer's, for each compared figure (None where either is None or 0)."""

    def ratio(a: Any, b: Any) -> float | None:
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
            return None
        return round(a / b, 3)

    return {name: ratio(ours.get(name), theirs.get(name)) for name in COMPARED}


def summary_of(raw: Sequence[Mapping[str, Any]], described: Mapping[str, Any]) -> Obj:
    """The medians of the rounds' figures, trainguard's ratios to each peer's, their ranges, and what was run. A
    round not yet taken whole (a peer in one mode missing) gives the ratios of the modes it has."""
    medians, ranges = summarize([r["figures"] for r in raw])
    summary: Obj = dict(medians)
    ours = medians.get("trainguard", {})
    summary["ratio"] = {
        peer: {
            mode: ratios(ours[mode], medians[peer][mode])
            for mode in MODES
            if mode in ours and mode in medians[peer]
        }
        for peer in medians
        if peer != "trainguard" and ours
    }
    summary["range"] = ranges
    taken = positions(r["order"] for r in raw if r.get("order"))
    summary["positions"] = taken
    summary["every_position"] = every_position(taken)
    summary.update(described)
    return summary


#: What a kept run must share with the others to be summarized with them: the size and the fault's shape.
SAME_IN_EVERY_KEPT_FILE = (
    "nodes",
    "jobs",
    "pods_per_job",
    "toleration_s",
    "toleration_set_in_pods",
    "node_eviction_rate",
    "nodes_down",
    "hold_s",
    "scale_by",
    # How finely the times were kept (absent: tenths): rounds kept to hundredths and to tenths are not mixed.
    "seconds_kept_to",
)


def combine(kept: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[Obj, list[Obj]]:
    """Raw files kept by separate invocations (``(name, content)``), as one: the description they share and
    every round of them, in round order; the parts of a round taken by separate invocations (``--from-entry``)
    joined into one. ValueError, naming the file and the field, where one is not a kept run of this benchmark,
    differs from the first in its size, or repeats a round or a part of one."""
    if not kept:
        raise ValueError("no kept runs to summarize")
    first_name, first = kept[0]
    rounds: dict[int, Obj] = {}
    for name, content in kept:
        if not isinstance(content.get("runs_raw"), list):
            raise ValueError(f"{name}: no runs_raw: not a file kept by benchmarks/k8s_peers.py")
        for field in SAME_IN_EVERY_KEPT_FILE:
            if content.get(field) != first.get(field):
                raise ValueError(
                    f"{name}: {field} is {content.get(field)!r} where {first_name} has {first.get(field)!r}: "
                    "only runs of the same size, measured alike, are summarized together"
                )
        for run in content["runs_raw"]:
            number = int(run["run"])
            figures = {peer: dict(modes) for peer, modes in run.get("figures", {}).items()}
            held = rounds.get(number)
            if held is None:
                rounds[number] = {**run, "figures": figures, "entries": entries_of(run), "kept_in": name}
                continue
            # The same round taken in parts (--from-entry): the parts must share its order and not overlap.
            if run.get("order") is None or list(run["order"]) != list(held.get("order") or []):
                raise ValueError(
                    f"{name}: round {number} is also in {held['kept_in']}: give each invocation its own "
                    "--first-run, or the same one with --from-entry to take the rest of a round"
                )
            both = sorted(set(entries_of(run)) & set(held["entries"]))
            if both:
                raise ValueError(
                    f"{name}: round {number}'s {', '.join(both)} is also in {held['kept_in']}: each part of a "
                    "round starts where the one before it ended (--from-entry)"
                )
            for peer, modes in figures.items():
                held["figures"].setdefault(peer, {}).update(modes)
            ran = set(held["entries"]) | set(entries_of(run))
            held["entries"] = [entry for entry in held["order"] if entry in ran]
            held["kept_in"] = f"{held['kept_in']} + {name}"
    described = {field: first.get(field) for field in SAME_IN_EVERY_KEPT_FILE}
    return described, [rounds[number] for number in sorted(rounds)]
