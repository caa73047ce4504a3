"""trainguard's operator and Kubeflow's training operator (v1.9), side by side: the same PyTorchJobs on the same
kwok cluster, one operator after the other, each with its own CRD and nothing else changed between the runs.

    python benchmarks/k8s_peers.py [--quick] [--nodes 1000] [--jobs 500] [--pods 8] [--window 600]

For each operator, with the cluster's nodes fresh and no job on it:
1. submit J PyTorchJobs of P pods (half Kubeflow's Master + Workers example, half its elastic example) ->
   every job has its P pods Running;
2. one Worker in a tenth of the jobs ends with exit code 137 (retryable under ``restartPolicy: ExitCode``)
   -> every job has its P pods Running again, the failed ones replaced;
3. a tenth of the nodes go NotReady -> every job has its P pods Running on nodes that are Ready, waiting at
   most ``--window`` seconds (Kubeflow's v1 operator does not watch nodes: its pods on a dead node wait for
   Kubernetes' own eviction, and a pod deleted on a dead node stays Terminating); the pods not back by then are
   counted;
4. the operator's CPU seconds and peak resident memory over the run (its process, read from /proc).

Kubeflow's operator is built from its Go module (scripts/build-kubeflow; cached) and run as its manifests run
it, but for what a kwok cluster cannot do (see docs/operator.md): its validating webhook is not registered
(the API server here cannot reach a Service), the certificate Secret its Deployment mounts is written to the
directory the process reads, and only the PyTorchJob controller is enabled. trainguard's operator runs with
``--pytorchjobs`` and the chart's PyTorchJob CRD. Both use their default API client rates.

``--quick``: 20 nodes, 10 jobs of 4 pods, a 180-second window (under 10 minutes in all). The last line printed
is one JSON object: {"trainguard": {...}, "kubeflow": {...}, "ratio": {...}, ...} with the same figure names
under both operators, and trainguard's over Kubeflow's for each (null where either is null or 0).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from _kwok import exit_code_patch, kwok_node, not_ready_patch

from trainguard.api.crd import aitrainingjob_crd, native_crd, pytorchjob_crd
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import ApiError, Kube

ROOT = Path(__file__).resolve().parents[1]

Obj = dict[str, Any]
CLUSTER = "peers"
NAMESPACE = "peers"
GROUP = "peers"
SCRIPTS = ROOT / "scripts"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
JOBS = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
#: The pods of a job's roles, as both operators name them (a rendezvous pod of trainguard's is not one).
POD_NAME = re.compile(r"^(?P<job>.+)-(?P<role>master|worker)-(?P<index>\d+)$")
#: Kubeflow's operator reads its webhook certificates from here (fixed in its code; its Deployment mounts the
#: Secret there).
KUBEFLOW_CERT_DIR = Path(tempfile.gettempdir()) / "k8s-webhook-server" / "serving-certs"
KUBEFLOW_CERT_SECRET = "training-operator-webhook-cert"
#: The images and commands of Kubeflow's own examples (kwok pulls nothing and runs nothing).
SIMPLE_IMAGE = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
SIMPLE_COMMAND = ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]
ECHO_IMAGE = "ghcr.io/kubeflow/training-v1/pytorch-elastic-example-echo:latest"
ECHO_COMMAND = ["python", "-m", "torch.distributed.run", "--rdzv_backend=c10d", "./echo.py"]


def say(text: str) -> None:
    print(f"k8s_peers: {text}", file=sys.stderr, flush=True)


# ---- the jobs ----------------------------------------------------------------------------------------


def pytorchjob(name: str, pods: int, elastic: bool) -> Obj:
    """Kubeflow's examples (simple.yaml: Master + Workers; elastic/echo: elastic Workers) at ``pods`` pods,
    with ``restartPolicy: ExitCode``: exit codes 128-255 are retried by recreating the pod."""

    def replicas(count: int, image: str, command: list[str]) -> Obj:
        container = {"name": "pytorch", "image": image, "command": command}
        return {
            "replicas": count,
            "restartPolicy": "ExitCode",
            "template": {"spec": {"containers": [container]}},
        }

    if elastic:
        spec: Obj = {
            "elasticPolicy": {
                "rdzvBackend": "c10d",
                "minReplicas": 1,
                "maxReplicas": pods,
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


def job_names(count: int) -> list[str]:
    return [f"job-{i}" for i in range(count)]


# ---- what the pods say -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    name: str
    job: str
    uid: str
    node: str
    running: bool


def role_pods(cache: Cache) -> list[Pod]:
    """The jobs' role pods that are not being deleted."""
    found = []
    for obj in cache.items():
        meta, match = obj["metadata"], POD_NAME.match(obj["metadata"]["name"])
        if match is None or meta.get("deletionTimestamp"):
            continue
        running = (obj.get("status") or {}).get("phase") == "Running"
        found.append(Pod(meta["name"], match["job"], meta["uid"], obj["spec"].get("nodeName", ""), running))
    return found


def missing(cache: Cache, jobs: list[str], per_job: int, down: frozenset[str] = frozenset()) -> int:
    """How many pods the jobs lack to have ``per_job`` Running each on nodes that are not ``down``."""
    running = Counter(p.job for p in role_pods(cache) if p.running and p.node not in down)
    return sum(max(0, per_job - running[job]) for job in jobs)


def wait_for(
    what: str, done: Callable[[], bool], timeout: float, progress: Callable[[], str]
) -> float | None:
    """Seconds until ``done()``, or None after ``timeout``; progress every 30 s on stderr."""
    started = last = time.monotonic()
    while True:
        if done():
            return time.monotonic() - started
        now = time.monotonic()
        if now - started >= timeout:
            say(f"{what}: not within {timeout:g} s ({progress()})")
            return None
        if now - last >= 30:
            last = now
            say(f"{what}: {now - started:4.0f} s, {progress()}")
        time.sleep(0.25)


# ---- the operators -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Operator:
    """One operator as a process of its own, and what it needs on the cluster."""

    name: str
    argv: list[str]
    crds: list[Obj]
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def usage(self) -> tuple[float, float]:
        """(CPU seconds, peak resident memory in MiB) of the process so far."""
        assert self.process is not None
        pid = self.process.pid
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        status = Path(f"/proc/{pid}/status").read_text()
        peak_kib = int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)[1])  # type: ignore[index]
        return cpu, peak_kib / 1024

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def trainguard_operator(kubeconfig: str, pytorchjobs: Obj) -> Operator:
    binary = Path(sys.executable).with_name("trainguard")
    argv = [str(binary), "operator", "--namespace", NAMESPACE, "--kubeconfig", kubeconfig]
    argv += ["--scheduler-name", "default-scheduler", "--pytorchjobs", "--lease-namespace", NAMESPACE]
    argv += ["--id", "peers"]
    # Its chart installs the CRDs of the kinds it serves.
    return Operator("trainguard", argv, [native_crd(), aitrainingjob_crd(), pytorchjobs])


def kubeflow_operator(kubeconfig: str, built: Path) -> Operator:
    argv = [str(built / "training-operator"), "--kubeconfig", kubeconfig, "--namespace", NAMESPACE]
    argv += ["--enable-scheme", "pytorchjob", "--webhook-server-port", str(free_port())]
    argv += ["--metrics-bind-address", f"127.0.0.1:{free_port()}"]
    argv += ["--health-probe-bind-address", f"127.0.0.1:{free_port()}", "--zap-log-level", "info"]
    crd = kubeflow_crd(built)
    # MY_POD_NAMESPACE: its Deployment's namespace, where it keeps its certificate Secret.
    return Operator("kubeflow", argv, [crd], env={"MY_POD_NAMESPACE": NAMESPACE, "KUBECONFIG": kubeconfig})


def kubeflow_crd(built: Path) -> Obj:
    crd: Obj = yaml.safe_load((built / "crds" / "kubeflow.org_pytorchjobs.yaml").read_text())
    return crd


def probe_address(operator: Operator) -> str:
    return operator.argv[operator.argv.index("--health-probe-bind-address") + 1]


# ---- the cluster -------------------------------------------------------------------------------------


def cluster_up() -> str:
    env = {**os.environ, "TRAINGUARD_K8S_CLUSTER": CLUSTER}
    script = SCRIPTS / "k8s-testcluster"
    out = subprocess.run([str(script), "up"], env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
    return out.strip().removeprefix("export KUBECONFIG=")


def cluster_down() -> None:
    env = {**os.environ, "TRAINGUARD_K8S_CLUSTER": CLUSTER}
    subprocess.run([str(SCRIPTS / "k8s-testcluster"), "down"], env=env, check=False)


def in_parallel(action: Callable[[Any], Any], items: list[Any]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(action, items))


def create(kube: Kube, path: str, body: Obj) -> None:
    try:
        kube.create(path, body)
    except ApiError as error:
        if error.status != 409:
            raise


def delete(kube: Kube, path: str, grace: int | None = None) -> None:
    try:
        kube.delete(path, grace=grace)
    except ApiError as error:
        if error.status != 404:
            raise


def gone(kube: Kube, path: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kube.get(path)
        except ApiError as error:
            if error.status == 404:
                return
            raise
        time.sleep(0.5)
    raise SystemExit(f"{path} still there after {timeout:g} s")


def fresh_nodes(kube: Kube, names: list[str], pods_per_node: int) -> None:
    """The benchmark's nodes, new and Ready (earlier ones, with their taints and faults, deleted first)."""
    listed = kube.list("/api/v1/nodes", labelSelector=f"trainguard.io/test-nodes={GROUP}")["items"]
    in_parallel(lambda n: delete(kube, f"/api/v1/nodes/{n['metadata']['name']}"), listed)
    for node in listed:
        gone(kube, f"/api/v1/nodes/{node['metadata']['name']}")
    in_parallel(lambda n: create(kube, "/api/v1/nodes", kwok_node(n, pods_per_node, group=GROUP)), names)

    def ready() -> bool:
        items = kube.list("/api/v1/nodes", labelSelector=f"trainguard.io/test-nodes={GROUP}")["items"]
        ready_ones = [
            n
            for n in items
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        ]
        return len(ready_ones) == len(names)

    if wait_for("nodes Ready", ready, 120, lambda: "") is None:
        raise SystemExit("the nodes did not become Ready")


def clean(kube: Kube, crds: list[Obj]) -> None:
    """No job, pod or Service left in the namespace, and the operator's CRDs gone."""
    delete(kube, JOBS)  # every PyTorchJob (a collection)
    pods = kube.list(PODS)["items"]
    in_parallel(lambda p: delete(kube, f"{PODS}/{p['metadata']['name']}", grace=0), pods)
    services = kube.list(f"/api/v1/namespaces/{NAMESPACE}/services")["items"]
    in_parallel(
        lambda s: delete(kube, f"/api/v1/namespaces/{NAMESPACE}/services/{s['metadata']['name']}"), services
    )
    for crd in crds:
        delete(kube, f"{CRDS}/{crd['metadata']['name']}")
    for crd in crds:
        gone(kube, f"{CRDS}/{crd['metadata']['name']}")
    deadline = time.monotonic() + 120
    while kube.list(PODS)["items"]:
        if time.monotonic() > deadline:
            raise SystemExit("pods still there after the clean-up")
        time.sleep(0.5)


def install_crds(kube: Kube, crds: list[Obj]) -> None:
    for crd in crds:
        create(kube, CRDS, crd)
    for crd in crds:
        name = crd["metadata"]["name"]

        def established(name: str = name) -> bool:
            conditions = (kube.get(f"{CRDS}/{name}").get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        if wait_for(f"CRD {name} established", established, 60, lambda: "") is None:
            raise SystemExit(f"CRD {name} was not established")


@contextlib.contextmanager
def running(kube: Kube, operator: Operator, log: Path) -> Iterator[Operator]:
    """The operator started, and ready to act on jobs when the block starts; stopped after it."""
    if operator.name == "kubeflow":
        create(
            kube,
            f"/api/v1/namespaces/{NAMESPACE}/secrets",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": KUBEFLOW_CERT_SECRET}},
        )
        shutil.rmtree(KUBEFLOW_CERT_DIR, ignore_errors=True)
    with log.open("ab") as out:
        operator.process = subprocess.Popen(
            operator.argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **operator.env}
        )
    try:
        ready = kubeflow_ready if operator.name == "kubeflow" else trainguard_ready
        if (
            wait_for(f"{operator.name} ready", lambda: ready(kube, operator), 120, lambda: f"log: {log}")
            is None
        ):
            raise SystemExit(f"{operator.name}'s operator did not become ready; its log: {log}")
        yield operator
    finally:
        operator.stop()


def trainguard_ready(kube: Kube, operator: Operator) -> bool:
    """It holds its Lease: it has listed what it serves and acts."""
    assert operator.process is not None
    if operator.process.poll() is not None:
        raise SystemExit(f"trainguard's operator exited ({operator.process.returncode})")
    try:
        lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/trainguard-operator")
    except ApiError:
        return False
    return bool(lease.get("spec", {}).get("holderIdentity") == "peers")


def kubeflow_ready(kube: Kube, operator: Operator) -> bool:
    """Its readiness probe answers (certificates in place, webhook server up); until then, the certificate
    Secret it fills is written where its Deployment would mount it."""
    assert operator.process is not None
    if operator.process.poll() is not None:
        raise SystemExit(f"Kubeflow's operator exited ({operator.process.returncode})")
    if not (KUBEFLOW_CERT_DIR / "tls.crt").exists():
        data = kube.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{KUBEFLOW_CERT_SECRET}").get("data") or {}
        if "tls.crt" in data and "tls.key" in data:
            KUBEFLOW_CERT_DIR.mkdir(parents=True, exist_ok=True)
            for key, value in data.items():
                (KUBEFLOW_CERT_DIR / key).write_bytes(base64.b64decode(value))
        return False
    try:
        with urllib.request.urlopen(f"http://{probe_address(operator)}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


# ---- one operator's run ------------------------------------------------------------------------------


@dataclass
class Size:
    nodes: int
    jobs: int
    pods: int
    window: float
    fraction: float = 0.1


def run_one(kube: Kube, operator: Operator, size: Size, log: Path) -> Obj:
    say(f"{operator.name}: fresh nodes, its CRDs")
    names = [f"peer-node-{i}" for i in range(size.nodes)]
    # Room for every pod twice over (and trainguard's rendezvous pods), so that replacements find a place.
    fresh_nodes(kube, names, max(4, math.ceil(2 * size.jobs * (size.pods + 1) / size.nodes)))
    install_crds(kube, operator.crds)
    pods = Cache(kube, PODS, lambda new, old: None)
    pods.start()
    jobs = job_names(size.jobs)
    figures: Obj = {}
    try:
        with running(kube, operator, log):

            def progress(down: frozenset[str] = frozenset()) -> str:
                return f"{missing(pods, jobs, size.pods, down)} pods short"

            say(f"{operator.name}: submitting {size.jobs} jobs of {size.pods} pods")
            submitted = time.monotonic()
            in_parallel(
                lambda i: create(kube, JOBS, pytorchjob(jobs[i], size.pods, elastic=i % 2 == 1)),
                list(range(size.jobs)),
            )
            took = wait_for("all Running", lambda: missing(pods, jobs, size.pods) == 0, 1800, progress)
            if took is None:
                raise SystemExit(f"{operator.name}: the jobs never all ran")
            figures["all_running_s"] = round(time.monotonic() - submitted, 1)

            # 2. a retryable exit code in a tenth of the jobs
            hit_jobs = jobs[: max(1, math.ceil(size.jobs * size.fraction))]
            by_name = {p.name: p for p in role_pods(pods)}
            hit = [by_name[f"{job}-worker-0"] for job in hit_jobs]
            old = {p.uid for p in hit}
            say(f"{operator.name}: exit code 137 in {len(hit)} pods")
            faulted = time.monotonic()
            in_parallel(lambda p: kube.patch(f"{PODS}/{p.name}", exit_code_patch(137)), hit)

            def replaced() -> bool:
                current = role_pods(pods)
                return missing(pods, jobs, size.pods) == 0 and not any(p.uid in old for p in current)

            took = wait_for("back after the exit codes", replaced, size.window, progress)
            figures["back_after_exit_codes_s"] = (
                None if took is None else round(time.monotonic() - faulted, 1)
            )
            figures["pods_not_back_after_exit_codes"] = missing(pods, jobs, size.pods)

            # 3. a tenth of the nodes NotReady
            # The busiest tenth of the nodes (by the jobs' pods they hold, then by name), so that both operators
            # lose about as many pods, however the scheduler placed them.
            held = Counter(p.node for p in role_pods(pods))
            busiest = sorted(names, key=lambda n: (-held[n], n))
            down = frozenset(busiest[: max(1, math.ceil(size.nodes * size.fraction))])
            lost = [p for p in role_pods(pods) if p.node in down]
            say(f"{operator.name}: {len(down)} nodes NotReady, {len(lost)} pods on them")
            faulted = time.monotonic()
            in_parallel(lambda n: kube.patch(f"/api/v1/nodes/{n}", not_ready_patch()), sorted(down))
            took = wait_for(
                "back after the node loss",
                lambda: missing(pods, jobs, size.pods, down) == 0,
                size.window,
                lambda: progress(down),
            )
            figures["pods_lost_with_nodes"] = len(lost)
            figures["back_after_node_loss_s"] = None if took is None else round(time.monotonic() - faulted, 1)
            figures["pods_not_back_after_window"] = missing(pods, jobs, size.pods, down)
            terminating = [
                o
                for o in pods.items()
                if o["metadata"].get("deletionTimestamp") and POD_NAME.match(o["metadata"]["name"])
            ]
            figures["pods_terminating_at_the_end"] = len(terminating)

            cpu, peak = operator.usage()
            figures["cpu_s"] = round(cpu, 1)
            figures["peak_memory_mib"] = round(peak, 1)
    finally:
        pods.stop()
        say(f"{operator.name}: cleaning up")
        clean(kube, operator.crds)
    say(f"{operator.name}: {json.dumps(figures)}")
    return figures


#: The figures compared as trainguard's over Kubeflow's.
COMPARED = (
    "all_running_s",
    "back_after_exit_codes_s",
    "back_after_node_loss_s",
    "pods_not_back_after_window",
    "cpu_s",
    "peak_memory_mib",
)


def ratios(ours: Obj, theirs: Obj) -> Obj:
    def ratio(a: Any, b: Any) -> float | None:
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
            return None
        return round(a / b, 3)

    return {name: ratio(ours.get(name), theirs.get(name)) for name in COMPARED}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 nodes, 10 jobs of 4 pods, a 180 s window")
    parser.add_argument("--nodes", type=int, default=None, help="kwok nodes (1000)")
    parser.add_argument("--jobs", type=int, default=None, help="PyTorchJobs (500)")
    parser.add_argument("--pods", type=int, default=None, help="pods per job (8)")
    parser.add_argument(
        "--window", type=float, default=None, help="seconds to wait for pods to come back (600)"
    )
    parser.add_argument(
        "--only", choices=["trainguard", "kubeflow"], default=None, help="run one operator (for debugging)"
    )
    parser.add_argument(
        "--trainguard-on-kubeflows-crd",
        action="store_true",
        help="give trainguard Kubeflow's PyTorchJob CRD rather than its chart's (it refuses to start on it)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    defaults = (20, 10, 4, 180.0) if args.quick else (1000, 500, 8, 600.0)
    size = Size(
        nodes=args.nodes or defaults[0],
        jobs=args.jobs or defaults[1],
        pods=args.pods or defaults[2],
        window=args.window or defaults[3],
    )
    if size.pods < 2:
        parser.error("--pods: at least 2 (a Master and a Worker)")

    started = time.monotonic()
    say("building Kubeflow's training operator (cached after the first time)")
    built = Path(
        subprocess.run(
            [str(SCRIPTS / "build-kubeflow")], stdout=subprocess.PIPE, text=True, check=True
        ).stdout.strip()
    )
    kubeconfig = cluster_up()
    kube = Kube(kubeconfig)
    logs = Path(tempfile.mkdtemp(prefix="k8s-peers-"))
    load_before = os.getloadavg()[0]
    results: Obj = {}
    try:
        create(
            kube,
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        )
        ours = kubeflow_crd(built) if args.trainguard_on_kubeflows_crd else pytorchjob_crd()
        operators = [trainguard_operator(kubeconfig, ours), kubeflow_operator(kubeconfig, built)]
        for operator in operators:
            if args.only in (None, operator.name):
                results[operator.name] = run_one(kube, operator, size, logs / f"{operator.name}.log")
    finally:
        kube.close()
        if not args.keep:
            cluster_down()
    say(f"operators' logs: {logs}")
    summary: Obj = dict(results)
    if "trainguard" in results and "kubeflow" in results:
        summary["ratio"] = ratios(results["trainguard"], results["kubeflow"])
    summary.update(
        nodes=size.nodes,
        jobs=size.jobs,
        pods_per_job=size.pods,
        window_s=size.window,
        load_average_1m={"start": round(load_before, 2), "end": round(os.getloadavg()[0], 2)},
        cpus=os.cpu_count(),
        wall_s=round(time.monotonic() - started, 1),
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
