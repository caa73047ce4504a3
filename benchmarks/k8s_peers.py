"""trainguard's operator beside its peers, Kubeflow's training operator (v1.9) and Volcano's Job (v1.14): the same
faults on the same kwok cluster, one operator after the other, each with its own CRDs and nothing else changed
between the runs.

    python benchmarks/k8s_peers.py [--quick] [--nodes 1000] [--jobs 500] [--pods 8] [--runs 5]
                                   [--toleration 300] [--window S] [--only trainguard,kubeflow,volcano]
                                   [--first-run N] [--from-entry K] [--submit-trace]
    python benchmarks/k8s_peers.py --summarize benchmarks/results/k8s_peers-1000n-*.json
    python benchmarks/k8s_peers.py --table benchmarks/results/k8s_peers-quick-*.json   # docs/operator.md's table
    python benchmarks/k8s_peers.py --trace-table KEPT...   # its table of the submits traced (--submit-trace)

For each operator, with the cluster's nodes fresh and no job on it:
1. submit J jobs of P pods -> every job has its P pods Running (trainguard and Kubeflow: PyTorchJobs, half
   Kubeflow's Master + Workers example, half its elastic example; Volcano: Jobs of a launcher and workers, the
   shape of CCE's Horovod example);
2. one Worker in a tenth of the jobs ends with exit code 137 -> every job has its pods Running again, the
   failed ones replaced;
3. a Worker in another tenth is deleted and stays Terminating (a finalizer stands in for the kubelet of a
   NotReady node, which never confirms), ``--hold`` seconds, then is force-deleted -> those jobs have all their
   pods again (and how many were whole before the force-deletion);
4. the Worker replicas of another tenth (the elastic PyTorchJobs; Volcano: its worker task) go up by 2 -> the
   new pods Running;
5. the busiest tenth of the nodes go NotReady -> every job has its pods Running on nodes that are Ready, or the
   count still short when the window ends. The window lets Kubernetes' own eviction finish: the pods'
   toleration of the NotReady taint + the taints' pace (kube-controller-manager's --node-eviction-rate, 0.1
   node/s) + 90 s;
6. the operator's CPU seconds and peak resident memory over the run (its process, read from /proc).

Before the operator starts, an object of each kind its CRDs define is written with ``dryRun``: the API server's
first write of a kind whose CRD was just established waits about 2 s, which the operator ready soonest would
otherwise pay in its submit (``crd_first_write_s``).

Each peer is measured twice: as its manifests run it ("as_shipped") and with trainguard's means ("equal": no
client rate limit, and as many requests in flight as trainguard can have, see ``_peers.KUBEFLOW_EQUAL`` and
``VOLCANO_EQUAL`` for why each is given what it is). trainguard's settings are the same in both, so it runs
once per round and its figures stand under both. ``--runs N`` repeats the whole round, each starting one
entry further along: over as many rounds as there are entries (5, the default at full size) each entry takes
every position once. The raw figures of every run are kept under benchmarks/results/ with the commit, the
machine, its load, each operator's settings and why, each round's order and the wall time.
At full size a round takes hours on a small machine (the peers wait out Kubernetes' eviction of 100 nodes),
so rounds may be taken by separate invocations: ``--first-run N`` numbers this invocation's first round N (the
order goes on rotating), ``--from-entry K`` starts that first round at its K-th entry (an earlier invocation
with the same ``--first-run`` took the ones before: a round longer than a session is taken in parts; the file
is rewritten after each entry, so a stopped invocation loses only the entry it was in), and ``--summarize
KEPT...`` runs nothing and prints the summary of the rounds in those kept files, which must be of the same
size, the parts of a round joined.

Kubeflow's operator is built from its Go module (scripts/build-kubeflow; cached), Volcano's scheduler and
controller manager by scripts/k8s-testcluster (as for real nodes; cached). What a kwok cluster cannot do is
changed (see docs/operator.md): no admission webhooks (Kubeflow's validation, Volcano's defaults, written into
the Jobs instead), Kubeflow's certificate Secret written to the directory its process reads, and only the
PyTorchJob controller of Kubeflow's enabled.

``--quick``: 20 nodes, 10 jobs of 4 pods, a toleration of 10 s, one round (under 10 minutes in all). The last
line printed is one JSON object: {"trainguard": {"as_shipped": {...}, "equal": {...}}, "kubeflow": {...},
"volcano": {...}, "ratio": {"kubeflow": {"as_shipped": {...}, ...}, ...}, "range": {...}, "settings": {...},
...}: the medians of each figure, trainguard's over each peer's, and the lowest and highest of the runs.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib.util
import itertools
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from _kwok import POD_COMPLETE_STAGE, batch_jobs_only, exit_code_patch, kwok_node, not_ready_patch
from _peer_table import table_of
from _peers import (
    DEFAULT_EVICTION_RATE,
    HOLD_FINALIZER,
    MODES,
    NAMESPACE,
    NODE_TAINTS,
    Pod,
    Settings,
    busiest,
    combine,
    elastic,
    eviction_window,
    job_names,
    kubeflow_flags,
    missing,
    pytorchjob,
    pytorchjob_scaled,
    role_pods,
    rounds_to_take,
    settings,
    summary_of,
    targets,
    terminating,
    volcano_flags,
    volcano_job,
    volcano_scaled,
)
from _results import ENV_UNDER_TEST, keep, machine
from _submit_trace import SubmitTrace, trace_table

from trainguard.api.crd import aitrainingjob_crd, native_crd, pytorchjob_crd
from trainguard.backends.k8s.cache import Cache
from trainguard.backends.k8s.client import ApiError, Kube

ROOT = Path(__file__).resolve().parents[1]

Obj = dict[str, Any]
CLUSTER = "peers"
GROUP = "peers"
SCRIPTS = ROOT / "scripts"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
PYTORCHJOBS = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs"
VCJOBS = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs"
PEERS = ("trainguard", "kubeflow", "volcano")
#: Kubeflow's operator reads its webhook certificates from here (fixed in its code; its Deployment mounts the
#: Secret there).
KUBEFLOW_CERT_DIR = Path(tempfile.gettempdir()) / "k8s-webhook-server" / "serving-certs"
KUBEFLOW_CERT_SECRET = "training-operator-webhook-cert"
#: What Volcano's controller manager runs here: its Job, PodGroup, Queue and garbage-collection controllers.
VOLCANO_CONTROLLERS = "job-controller,pg-controller,queue-controller,gc-controller"
#: Pods each node takes beyond twice the jobs' pods (trainguard's rendezvous pods, scaled-out workers).
SPARE_PODS = 4


def say(text: str) -> None:
    print(f"k8s_peers: {text}", file=sys.stderr, flush=True)


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
class Process:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    def usage(self) -> tuple[float, float]:
        """(CPU seconds, peak resident memory in MiB) of the process so far."""
        assert self.popen is not None
        pid = self.popen.pid
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        status = Path(f"/proc/{pid}/status").read_text()
        peak_kib = int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)[1])  # type: ignore[index]
        return cpu, peak_kib / 1024

    def exited(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def stop(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=10)


@dataclass
class Operator:
    """One operator: its processes (the first is the controller measured), its CRDs, and how its jobs are
    submitted and scaled."""

    peer: str
    mode: str
    settings: Settings
    processes: list[Process]
    crds: list[Obj]
    jobs_path: str
    #: Anything else the run needs: the Volcano build's directory, the operator's webhook port...
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.peer if self.peer == "trainguard" else f"{self.peer}/{self.mode}"

    def job(self, name: str, index: int, pods: int, toleration_s: int | None) -> Obj:
        if self.peer == "volcano":
            return volcano_job(name, pods, toleration_s)
        return pytorchjob(name, pods, elastic(index), toleration_s)

    def scale(self, kube: Kube, job: str, workers: int) -> None:
        if self.peer == "volcano":
            current = kube.get(f"{self.jobs_path}/{job}")
            kube.replace(f"{self.jobs_path}/{job}", volcano_scaled(current, workers))
        else:
            kube.patch(f"{self.jobs_path}/{job}", pytorchjob_scaled(workers))

    def workers(self, pods: int, index: int) -> int:
        """A job's Worker replicas at the start (the elastic PyTorchJobs are all Workers)."""
        return pods if self.peer != "volcano" and elastic(index) else pods - 1


def trainguard_operator(kubeconfig: str, pytorchjobs: Obj) -> Operator:
    binary = Path(sys.executable).with_name("trainguard")
    argv = [str(binary), "operator", "--namespace", NAMESPACE, "--kubeconfig", kubeconfig]
    argv += ["--scheduler-name", "default-scheduler", "--pytorchjobs", "--lease-namespace", NAMESPACE]
    given = settings("trainguard", "as_shipped")
    argv += ["--id", "peers", "--workers", str(given.workers)]
    argv += ["--requests-in-flight", str(given.requests_in_flight or 0)]
    # Its chart installs the CRDs of the kinds it serves.
    crds = [native_crd(), aitrainingjob_crd(), pytorchjobs]
    # benchmarks/against.py --same-script names the trainguard to measure (another commit's src).
    under_test = os.environ.get(ENV_UNDER_TEST)
    process = Process("trainguard", argv, {"PYTHONPATH": under_test} if under_test else {})
    return Operator(
        "trainguard", "as_shipped", settings("trainguard", "as_shipped"), [process], crds, PYTORCHJOBS
    )


def under_test_commit() -> str | None:
    """The commit of the trainguard measured where ``TRAINGUARD_UNDER_TEST`` names one; None where it is this
    tree's."""
    src = os.environ.get(ENV_UNDER_TEST)
    if not src:
        return None
    head = ["git", "rev-parse", "--short", "HEAD"]
    return subprocess.run(head, cwd=src, capture_output=True, text=True, check=True).stdout.strip()


def kubeflow_operator(kubeconfig: str, built: Path, mode: str) -> Operator:
    setting = settings("kubeflow", mode)
    probe = f"127.0.0.1:{free_port()}"
    argv = [str(built / "training-operator"), "--kubeconfig", kubeconfig, "--namespace", NAMESPACE]
    argv += ["--enable-scheme", "pytorchjob", "--webhook-server-port", str(free_port())]
    argv += ["--metrics-bind-address", f"127.0.0.1:{free_port()}"]
    argv += ["--health-probe-bind-address", probe, "--zap-log-level", "info"]
    argv += kubeflow_flags(setting)
    # MY_POD_NAMESPACE: its Deployment's namespace, where it keeps its certificate Secret.
    process = Process("training-operator", argv, {"MY_POD_NAMESPACE": NAMESPACE, "KUBECONFIG": kubeconfig})
    return Operator(
        "kubeflow", mode, setting, [process], [kubeflow_crd(built)], PYTORCHJOBS, extra={"probe": probe}
    )


def kubeflow_crd(built: Path) -> Obj:
    crd: Obj = yaml.safe_load((built / "crds" / "kubeflow.org_pytorchjobs.yaml").read_text())
    return crd


def volcano_operator(kubeconfig: str, built: Path, logs: Path, mode: str) -> Operator:
    """vc-controller-manager (the Job's controller, measured) and vc-scheduler (which every Volcano Job needs:
    its PodGroup waits in the queue until the scheduler admits it), as scripts/lib/realnodes.py runs them."""
    setting = settings("volcano", mode)
    state = logs / "volcano"
    conf = state / "conf" / "scheduler.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(realnodes().VOLCANO_SCHEDULER_CONF)
    common = [f"--kubeconfig={kubeconfig}", "--leader-elect=false", "--scheduler-name=volcano"]
    # Each its own ports: the same health-check address for both lets one of them fail to serve.
    controller = [str(built / "vc-controller-manager"), *common, f"--controllers={VOLCANO_CONTROLLERS}"]
    controller += [f"--healthz-address=127.0.0.1:{free_port()}"]
    controller += [f"--listen-address=127.0.0.1:{free_port()}", *volcano_flags(setting), "--v=2"]
    scheduler = [str(built / "vc-scheduler"), *common, f"--scheduler-conf={conf}", "--default-queue=default"]
    scheduler += [f"--listen-address=127.0.0.1:{free_port()}", f"--healthz-address=127.0.0.1:{free_port()}"]
    scheduler += [f"--cache-dump-dir={state}", "--v=2"]
    processes = [
        Process("vc-controller-manager", controller),
        # Its log-level socket in a directory of its own (else one under /tmp that every cluster shares).
        Process("vc-scheduler", scheduler, {"DEBUG_SOCKET_DIR": str(state / "sockets")}),
    ]
    crds = [yaml.safe_load(path.read_text()) for path in volcano_crd_files(built)]
    return Operator("volcano", mode, setting, processes, crds, VCJOBS)


def realnodes() -> Any:
    """scripts/lib/realnodes.py, for the scheduler configuration it gives vc-scheduler (Volcano's installer's)."""
    spec = importlib.util.spec_from_file_location("realnodes", SCRIPTS / "lib" / "realnodes.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {SCRIPTS / 'lib' / 'realnodes.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def volcano_build() -> Path:
    """Where scripts/k8s-testcluster keeps its Volcano build (built first if it is not there)."""
    cache = Path(os.environ.get("TRAINGUARD_K8S_CACHE", Path.home() / ".cache" / "trainguard" / "k8s"))
    version = volcano_version()
    found = sorted((cache / "bin").glob(f"volcano-{version}-*/.complete"))
    if not found:
        say("building Volcano (scripts/k8s-testcluster build --volcano; cached after the first time)")
        subprocess.run(
            [str(SCRIPTS / "k8s-testcluster"), "build", "--volcano"], stdout=subprocess.DEVNULL, check=True
        )
        found = sorted((cache / "bin").glob(f"volcano-{version}-*/.complete"))
    if not found:
        raise SystemExit(f"no Volcano {version} build under {cache / 'bin'}")
    return found[-1].parent


def volcano_version() -> str:
    for line in (SCRIPTS / "k8s" / "volcano" / "go.mod").read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "volcano.sh/volcano" and words[1].startswith("v"):
            return words[1]
    raise SystemExit("cannot read Volcano's version from scripts/k8s/volcano/go.mod")


def volcano_crd_files(built: Path) -> list[Path]:
    """The CRDs the build keeps for its scheduler, and the Job's own, from the module the build used."""
    cache = built.parents[1]
    job = cache / "go" / "mod" / f"volcano.sh/volcano@{volcano_version()}" / "config" / "crd" / "volcano"
    return [*sorted((built / "crds").glob("*.yaml")), job / "bases" / "batch.volcano.sh_jobs.yaml"]


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


NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
#: Each run's nodes are named anew (peer-<run>-node-<i>): nothing of an earlier run's nodes is reused.
_RUN_SERIAL = itertools.count(1)


def fresh_nodes(kube: Kube, names: list[str], pods_per_node: int) -> None:
    """The benchmark's nodes, new and Ready (earlier ones, with their taints and faults, deleted first)."""
    listed = kube.list("/api/v1/nodes", labelSelector=f"trainguard.io/test-nodes={GROUP}")["items"]
    in_parallel(lambda n: delete(kube, f"/api/v1/nodes/{n['metadata']['name']}"), listed)
    for node in listed:
        gone(kube, f"/api/v1/nodes/{node['metadata']['name']}")
    # Their Leases too: kwok acts on a node's pods only once it holds the node's Lease, and a Lease left by a
    # deleted node of the same name is not taken over before it expires (the first run of each round had fresh
    # names, the others waited ~45 s for their pods to run). New nodes have new names as well (see run_one).
    in_parallel(lambda n: delete(kube, f"{NODE_LEASES}/{n['metadata']['name']}"), listed)
    in_parallel(lambda n: create(kube, "/api/v1/nodes", kwok_node(n, pods_per_node, group=GROUP)), names)

    def ready() -> bool:
        items = kube.list("/api/v1/nodes", labelSelector=f"trainguard.io/test-nodes={GROUP}")["items"]
        ready_ones = {
            n["metadata"]["name"]
            for n in items
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        }
        held = {lease["metadata"]["name"] for lease in kube.list(NODE_LEASES)["items"]}
        return set(names) <= ready_ones & held

    if wait_for("nodes Ready, their Leases held by kwok", ready, 120, lambda: "") is None:
        raise SystemExit("the nodes did not become Ready")


def release_held(kube: Kube) -> None:
    """Every pod that still carries the benchmark's finalizer, let go."""
    for pod in kube.list(PODS)["items"]:
        if HOLD_FINALIZER in (pod["metadata"].get("finalizers") or []):
            with contextlib.suppress(ApiError):
                kube.patch(f"{PODS}/{pod['metadata']['name']}", without_hold(pod))


def without_hold(pod: Obj) -> Obj:
    kept = [f for f in pod["metadata"].get("finalizers") or [] if f != HOLD_FINALIZER]
    return {"metadata": {"finalizers": kept or None}}


def clean(kube: Kube, crds: list[Obj]) -> None:
    """No job, pod, Service, ConfigMap or Secret of a job left in the namespace, and the operator's CRDs gone."""
    release_held(kube)
    for crd in crds:
        delete(kube, f"{CRDS}/{crd['metadata']['name']}")
    pods = kube.list(PODS)["items"]
    in_parallel(lambda p: delete(kube, f"{PODS}/{p['metadata']['name']}", grace=0), pods)
    for kind in ("services", "configmaps", "secrets"):
        path = f"/api/v1/namespaces/{NAMESPACE}/{kind}"
        # (kube-root-ca.crt is the namespace's own.)
        paths = [f"{path}/{o['metadata']['name']}" for o in kube.list(path)["items"]]
        in_parallel(
            lambda path: delete(kube, path), [p for p in paths if not p.endswith("/kube-root-ca.crt")]
        )
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


def first_write(kube: Kube, operator: Operator) -> float:
    """The API server's first write of a kind whose CRD was just established waits (about 2 s here) while it
    makes the kind's storage ready; whichever operator is ready soonest after its CRDs went in would pay it in
    its submit, and Volcano in its PodGroups'. So each run writes an object of every kind it installed with
    ``dryRun`` (nothing is stored; a refusal of the object is as good) before the operator starts: the
    seconds that took."""
    started = time.monotonic()

    def write(crd: Obj) -> None:
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("storage"))
        group, plural = spec["group"], spec["names"]["plural"]
        scope = f"/namespaces/{NAMESPACE}" if spec.get("scope") == "Namespaced" else ""
        body = {
            "apiVersion": f"{group}/{version}",
            "kind": spec["names"]["kind"],
            "metadata": {"name": "first"},
        }
        with contextlib.suppress(ApiError):
            kube.request("POST", f"/apis/{group}/{version}{scope}/{plural}", body, query={"dryRun": "All"})

    in_parallel(write, operator.crds)
    return round(time.monotonic() - started, 1)


@contextlib.contextmanager
def running(kube: Kube, operator: Operator, logs: Path) -> Iterator[Operator]:
    """The operator started, and ready to act on jobs when the block starts; stopped after it."""
    prepare(kube, operator)
    for process in operator.processes:
        with (logs / f"{operator.name.replace('/', '-')}-{process.name}.log").open("ab") as out:
            process.popen = subprocess.Popen(
                process.argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **process.env}
            )
    try:
        for process in operator.processes:
            if process.exited() is not None:
                raise SystemExit(f"{operator.name}: {process.name} exited ({process.exited()}); logs: {logs}")
        if (
            wait_for(
                f"{operator.name} ready", lambda: ready(kube, operator, logs), 120, lambda: f"logs: {logs}"
            )
            is None
        ):
            raise SystemExit(f"{operator.name} did not become ready; its logs: {logs}")
        yield operator
    finally:
        for process in operator.processes:
            process.stop()


def prepare(kube: Kube, operator: Operator) -> None:
    """What the operator's manifests would have made before it starts, and nothing left of an earlier run."""
    if operator.peer == "trainguard":
        # The Lease of its last run names the same holder: ready only once this process holds it again.
        delete(kube, f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/trainguard-operator")
    if operator.peer == "kubeflow":
        create(
            kube,
            f"/api/v1/namespaces/{NAMESPACE}/secrets",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": KUBEFLOW_CERT_SECRET}},
        )
        shutil.rmtree(KUBEFLOW_CERT_DIR, ignore_errors=True)
    if operator.peer == "volcano":
        # The queue "default" under the hierarchy's root, as vc-scheduler would make them (realnodes.py does the
        # same): made first, the queue controller finds default's parent.
        for name, reclaimable in (("root", False), ("default", True)):
            queue = {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": {"reclaimable": reclaimable, "weight": 1},
            }
            create(kube, "/apis/scheduling.volcano.sh/v1beta1/queues", queue)


def ready(kube: Kube, operator: Operator, logs: Path) -> bool:
    for process in operator.processes:
        if process.exited() is not None:
            raise SystemExit(f"{operator.name}: {process.name} exited ({process.exited()}); logs: {logs}")
    if operator.peer == "trainguard":
        return trainguard_ready(kube)
    if operator.peer == "kubeflow":
        return kubeflow_ready(kube, operator)
    return volcano_ready(kube, logs / f"{operator.name.replace('/', '-')}-vc-scheduler.log")


def trainguard_ready(kube: Kube) -> bool:
    """It holds its Lease: it has listed what it serves and acts."""
    try:
        lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/trainguard-operator")
    except ApiError:
        return False
    return bool(lease.get("spec", {}).get("holderIdentity") == "peers")


def kubeflow_ready(kube: Kube, operator: Operator) -> bool:
    """Its readiness probe answers (certificates in place, webhook server up); until then, the certificate
    Secret it fills is written where its Deployment would mount it."""
    if not (KUBEFLOW_CERT_DIR / "tls.crt").exists():
        data = kube.get(f"/api/v1/namespaces/{NAMESPACE}/secrets/{KUBEFLOW_CERT_SECRET}").get("data") or {}
        if "tls.crt" in data and "tls.key" in data:
            KUBEFLOW_CERT_DIR.mkdir(parents=True, exist_ok=True)
            for key, value in data.items():
                (KUBEFLOW_CERT_DIR / key).write_bytes(base64.b64decode(value))
        return False
    try:
        with urllib.request.urlopen(f"http://{operator.extra['probe']}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def volcano_ready(kube: Kube, scheduler_log: Path) -> bool:
    """The queue controller has opened the queue "default" and vc-scheduler has its caches filled."""
    try:
        queue = kube.get("/apis/scheduling.volcano.sh/v1beta1/queues/default")
    except ApiError:
        return False
    if (queue.get("status") or {}).get("state") != "Open":
        return False
    return scheduler_log.exists() and "Scheduler completes Initialization" in scheduler_log.read_text(
        errors="replace"
    )


# ---- one operator's run ------------------------------------------------------------------------------


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
            figures["all_running_s"] = round(time.monotonic() - submitted, 1)
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
                None if took is None else round(time.monotonic() - faulted, 1)
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

            took = wait_for("back after the node loss", back, window, lambda: progress(down))
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
    for pod in held:
        kube.patch(f"{PODS}/{pod}", {"metadata": {"finalizers": [HOLD_FINALIZER]}})
    in_parallel(lambda p: delete(kube, f"{PODS}/{p}"), held)
    time.sleep(size.hold_s)
    current = role_pods(cache.items())
    whole_before = sum(1 for job in jobs if missing(current, {job: want[job]}) == 0)
    forced = time.monotonic()
    for pod in held:
        with contextlib.suppress(ApiError):
            kube.patch(f"{PODS}/{pod}", without_hold(kube.get(f"{PODS}/{pod}")))
        delete(kube, f"{PODS}/{pod}", grace=0)

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
        "back_after_force_delete_s": None if took is None else round(time.monotonic() - forced, 1),
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
        "scaled_running_s": None if took is None else round(time.monotonic() - started, 1),
        "pods_not_up_after_scale": missing(role_pods(cache.items()), want),
    }


# ---- the rounds --------------------------------------------------------------------------------------


def entries(only: list[str]) -> list[tuple[str, str]]:
    """(peer, mode) to run in one round: trainguard once, each peer in both modes. Rotated by one entry from one
    round to the next (``_peers.order``), so that over as many rounds as entries each takes every position."""
    found = [(peer, "as_shipped") for peer in PEERS if peer in only]
    return found + [(peer, "equal") for peer in PEERS if peer in only and peer != "trainguard"]


def settings_table(only: list[str]) -> Obj:
    """Each operator's settings in each mode, with the flags that give them (a client limit of None: none)."""
    flags: dict[str, Callable[[Settings], list[str]]] = {
        "trainguard": lambda s: [
            "--workers",
            str(s.workers),
            "--requests-in-flight",
            str(s.requests_in_flight or 0),
        ],
        "kubeflow": kubeflow_flags,
        "volcano": volcano_flags,
    }
    return {
        peer: {
            mode: {**settings(peer, mode).as_json(), "flags": flags[peer](settings(peer, mode))}
            for mode in MODES
        }
        for peer in PEERS
        if peer in only
    }


def keep_rounds(
    kept: Path | None, raw: list[Obj], at_start: Obj, described: Obj, args: argparse.Namespace, wall_s: float
) -> Path:
    """The rounds run so far (an entry being run left out), in this invocation's one raw file: written the first
    time, rewritten after; ``wall_s``: the invocation's seconds so far (cluster, builds and clean-ups included)."""
    content = {
        "machine": at_start,
        **described,
        "runs_raw": [record for record in raw if record["entries"]],
        "machine_at_end": machine(),
        "wall_s": round(wall_s, 1),
    }
    if kept is None:
        name = "k8s_peers-quick" if args.quick else f"k8s_peers-{described['nodes']}n"
        return keep(name, content, args.results)
    kept.write_text(json.dumps(content) + "\n")
    return kept


def summarize_kept(files: list[str]) -> int:
    """``--summarize``: the summary of rounds kept by separate invocations, as the last line."""
    kept: list[tuple[str, Obj]] = []
    try:
        for name in files:
            kept.append((name, json.loads(Path(name).read_text())))
        described, rounds = combine(kept)
    except (OSError, ValueError) as error:  # json's errors are ValueErrors
        print(f"k8s_peers --summarize: {error}", file=sys.stderr)
        return 2
    commits = sorted({str(content.get("machine", {}).get("commit")) for _, content in kept})
    say(f"{len(rounds)} rounds from {len(kept)} files, commits {', '.join(commits)}")
    summary = summary_of(rounds, {**described, "runs": len(rounds)})
    summary.update(rounds=[r["run"] for r in rounds], commits=commits, results=files)
    print(json.dumps(summary))
    return 0


def print_table(files: list[str], make: Callable[[list[tuple[str, Obj]]], list[str]], flag: str) -> int:
    """``--table`` (``table_of``) and ``--trace-table`` (``trace_table``): docs/operator.md's table made by
    ``make`` from these kept raw files (markdown, on stdout)."""
    try:
        kept = [(name, json.loads(Path(name).read_text())) for name in files]
        print("\n".join(make(kept)))
    except (OSError, ValueError) as error:  # json's errors are ValueErrors
        print(f"k8s_peers {flag}: {error}", file=sys.stderr)
        return 2
    return 0


def stopped(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 nodes, 10 jobs of 4 pods, 10 s toleration")
    parser.add_argument("--nodes", type=int, default=None, help="kwok nodes (1000)")
    parser.add_argument("--jobs", type=int, default=None, help="jobs (500)")
    parser.add_argument("--pods", type=int, default=None, help="pods per job (8)")
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        help="rounds, each starting one entry further along (as many as entries, 5, so that each takes every "
        "position; quick 1)",
    )
    parser.add_argument(
        "--toleration",
        type=int,
        default=None,
        help="seconds every job's pods tolerate a NotReady node (300, the API server's default; quick 10)",
    )
    parser.add_argument("--hold", type=float, default=10, help="seconds a pod stays Terminating (10)")
    parser.add_argument(
        "--window",
        type=float,
        default=None,
        help="seconds to wait after the node loss (toleration + nodes down / 0.1 per s + 90)",
    )
    parser.add_argument(
        "--only",
        default=",".join(PEERS),
        help="comma-separated operators to run (trainguard,kubeflow,volcano)",
    )
    parser.add_argument(
        "--trainguard-on-kubeflows-crd",
        action="store_true",
        help="give trainguard Kubeflow's PyTorchJob CRD rather than its chart's (it refuses to start on it)",
    )
    parser.add_argument(
        "--first-run",
        type=int,
        default=1,
        help="the number of this invocation's first round (1): rounds taken by separate invocations, e.g. one "
        "per day at full size, go on rotating which operator goes first",
    )
    parser.add_argument(
        "--from-entry",
        type=int,
        default=1,
        help="start the first round at its Nth entry (1): an earlier invocation with the same --first-run took "
        "the entries before it, so that a round longer than a session is taken in parts",
    )
    parser.add_argument(
        "--summarize",
        nargs="+",
        metavar="KEPT",
        help="run nothing: the medians and ranges of the rounds in these kept raw files (same size each)",
    )
    parser.add_argument(
        "--table",
        nargs="+",
        metavar="KEPT",
        help="run nothing: print the table of docs/operator.md for the rounds in these kept raw files",
    )
    parser.add_argument(
        "--submit-trace",
        action="store_true",
        help="trace each submit (benchmarks/_submit_trace.py: when pods were created, bound and Running, each "
        "process's CPU, the API server's writes, a pod's stored size) into the raw JSON's submit_traces",
    )
    parser.add_argument(
        "--trace-table",
        nargs="+",
        metavar="KEPT",
        help="run nothing: print the table of docs/operator.md for the submits traced in these kept raw files",
    )
    parser.add_argument("--results", default=None, help="where to keep the raw JSON (benchmarks/results)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    if args.summarize:
        return summarize_kept(args.summarize)
    if args.table:
        return print_table(args.table, table_of, "--table")
    if args.trace_table:
        return print_table(args.trace_table, trace_table, "--trace-table")
    only = [name for name in args.only.split(",") if name]
    if unknown := set(only) - set(PEERS):
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}")
    defaults = (20, 10, 4, 1, 10) if args.quick else (1000, 500, 8, len(entries(only)), None)
    size = Size(
        nodes=args.nodes or defaults[0],
        jobs=args.jobs or defaults[1],
        pods=args.pods or defaults[2],
        toleration_s=args.toleration if args.toleration is not None else defaults[4],
        hold_s=args.hold,
        window_s=args.window,
    )
    runs = args.runs or defaults[3]
    if size.pods < 3:
        parser.error("--pods: at least 3 (a Master and two Workers)")
    try:
        taken = rounds_to_take(
            args.first_run, runs, args.from_entry, [f"{peer}/{mode}" for peer, mode in entries(only)]
        )
    except ValueError as error:
        parser.error(str(error))

    # Stopped (SIGTERM, or SIGINT where a shell started it in the background), it still stops the operators,
    # keeps the runs done and takes the cluster down.
    signal.signal(signal.SIGTERM, stopped)
    started = time.monotonic()
    at_start = machine()
    kubeflow_built = volcano_built = Path()
    if "kubeflow" in only:
        say("building Kubeflow's training operator (cached after the first time)")
        kubeflow_built = Path(
            subprocess.run(
                [str(SCRIPTS / "build-kubeflow")], stdout=subprocess.PIPE, text=True, check=True
            ).stdout.strip()
        )
    if "volcano" in only:
        volcano_built = volcano_build()
    kubeconfig = cluster_up()
    kube = Kube(kubeconfig)
    logs = Path(tempfile.mkdtemp(prefix="k8s-peers-"))
    raw: list[Obj] = []
    kept: Path | None = None
    described: Obj = {
        "nodes": size.nodes,
        "jobs": size.jobs,
        "pods_per_job": size.pods,
        "toleration_s": size.toleration_s if size.toleration_s is not None else 300,
        "toleration_set_in_pods": size.toleration_s is not None,
        "node_eviction_rate": DEFAULT_EVICTION_RATE,
        "nodes_down": size.nodes_down,
        "node_window_s": size.node_window_s,
        "hold_s": size.hold_s,
        "scale_by": size.scale_by,
        "runs": runs,
        "settings": settings_table(only),
        # Where benchmarks/against.py --same-script measures another commit's trainguard: that commit.
        "trainguard_under_test": under_test_commit(),
    }
    try:
        create(
            kube,
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        )
        # kwok would end Volcano's pods as a batch Job's (its Stage matches any owner of kind Job).
        kube.replace(POD_COMPLETE_STAGE, batch_jobs_only(kube.get(POD_COMPLETE_STAGE)))
        ours = kubeflow_crd(kubeflow_built) if args.trainguard_on_kubeflows_crd else pytorchjob_crd()
        makers: dict[str, Callable[[str], Operator]] = {
            "trainguard": lambda mode: trainguard_operator(kubeconfig, ours),
            "kubeflow": lambda mode: kubeflow_operator(kubeconfig, kubeflow_built, mode),
            "volcano": lambda mode: volcano_operator(kubeconfig, volcano_built, logs, mode),
        }
        for number, whole, here in taken:
            say(
                f"round {number}: {', '.join(whole)}"
                + (f" (entries {len(whole) - len(here) + 1} to {len(whole)} here)" if here != whole else "")
            )
            # Kept after each entry, so that a stopped invocation (a session's end) loses only the entry it was in.
            record: Obj = {
                "run": number,
                "order": whole,
                "entries": [],
                "figures": {},
                "load_average": None,
                "entry_wall_s": {},
            }
            raw.append(record)
            for entry in here:
                peer, mode = entry.split("/")
                entry_started = time.monotonic()
                trace = SubmitTrace(lambda: kube.text("/metrics")) if args.submit_trace else None
                figures = run_one(kube, makers[peer](mode), size, logs, trace)
                if "submit_trace" in figures:
                    record.setdefault("submit_traces", {})[entry] = figures.pop("submit_trace")
                record["figures"].setdefault(peer, {})[mode] = figures
                record["entry_wall_s"][entry] = round(time.monotonic() - entry_started, 1)
                if peer == "trainguard":
                    # Its settings are the same in both modes: one run stands under both.
                    record["figures"]["trainguard"]["equal"] = record["figures"]["trainguard"]["as_shipped"]
                record["entries"].append(entry)
                record["load_average"] = machine()["load_average"]
                kept = keep_rounds(kept, raw, at_start, described, args, time.monotonic() - started)
                say(f"raw figures so far: {kept}")
    finally:
        kube.close()
        if not args.keep:
            cluster_down()
        say(f"operators' logs: {logs}")
        if any(record["entries"] for record in raw):
            kept = keep_rounds(kept, raw, at_start, described, args, time.monotonic() - started)
            say(f"raw figures: {kept}")
    raw = [record for record in raw if record["entries"]]
    summary = summary_of(raw, described)
    summary.update(
        results=None if kept is None else str(kept.relative_to(ROOT) if kept.is_relative_to(ROOT) else kept),
        load_average_1m={"start": at_start["load_average"][0], "end": machine()["load_average"][0]},
        cpus=os.cpu_count(),
        commit=at_start["commit"],
        wall_s=round(time.monotonic() - started, 1),
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
