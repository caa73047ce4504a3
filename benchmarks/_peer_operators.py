"""The operators ``k8s_peers.py`` measures: trainguard's, Kubeflow's training operator and Volcano's controller
manager with its scheduler. How each is built and started (its processes, flags and CRDs), what its manifests
would have made before it starts, when it is ready to act on jobs, and its processes stopped after the run."""

from __future__ import annotations

import base64
import contextlib
import importlib.util
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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from _peer_cluster import PYTORCHJOBS, SCRIPTS, VCJOBS, Obj, create, delete, in_parallel, say, wait_for
from _peers import (
    NAMESPACE,
    Settings,
    elastic,
    kubeflow_flags,
    pytorchjob,
    pytorchjob_scaled,
    settings,
    volcano_flags,
    volcano_job,
    volcano_scaled,
)
from _results import ENV_UNDER_TEST

from trainguard.api.crd import aitrainingjob_crd, native_crd
from trainguard.backends.k8s.client import ApiError, Kube

#: Kubeflow's operator reads its webhook certificates from here (fixed in its code; its Deployment mounts the
#: Secret there).
KUBEFLOW_CERT_DIR = Path(tempfile.gettempdir()) / "k8s-webhook-server" / "serving-certs"
KUBEFLOW_CERT_SECRET = "training-operator-webhook-cert"
#: What Volcano's controller manager runs here: its Job, PodGroup, Queue and garbage-collection controllers.
VOLCANO_CONTROLLERS = "job-controller,pg-controller,queue-controller,gc-controller"


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


def compile_modules(under_test: str | None) -> Path:
    """trainguard's modules compiled to bytecode before its operator starts, as its image has them (pip compiles
    them as it installs): in a fresh clone its first start would compile them itself, on the two cores the submit
    is measured on. The directory compiled (``under_test``'s, else the package this process imports)."""
    spec = importlib.util.find_spec("trainguard")
    assert spec is not None
    assert spec.origin is not None
    where = Path(under_test) if under_test else Path(spec.origin).parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(where)], check=False, capture_output=True)
    return where


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
    compile_modules(under_test)
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
