"""Real nodes for scripts/k8s-testcluster: `up --real-nodes N` starts them beside the control plane, `down`
removes everything they made. Run by that script (as root), not imported by the product.

A real node is a network namespace of its own with its own containerd, kubelet and kube-proxy (binaries
built from the pinned sources; runc and the CNI plugins from Debian's packages). The processes share the
machine's mount namespace (kubelet's volumes must be visible to containerd's runc) but each node has its own
directories, its own cgroup root and its own addresses, so stopping one node's kubelet makes that node
NotReady while the others keep running.

Addresses: every node, pod and Service address lives in namespaces that this script creates. The nodes sit
on a bridge in the machine's own namespace, whose address (NODE_NET .254) is where nodes and pods reach the
API server, the cluster DNS (CoreDNS, answering only for cluster.local: it forwards nothing) and the image
registry. Pods have routes to each other through their nodes; the machine does not forward (ip_forward stays
0), so nothing from a pod can leave the machine.

Volcano (gang scheduling) runs beside the control plane as processes of this machine: vc-scheduler (pods that name
schedulerName "volcano") and vc-controller-manager's queue and podgroup controllers, against the cluster's API
server with its admin kubeconfig, after its CRDs and the queue "default" are installed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

NODE_NET = "10.201.0"  # .254 is the machine's end of the bridge; node i is .(10 + i)
POD_NET = "10.202"  # node i's pods: 10.202.i.0/24
SERVICE_CIDR = "10.0.0.0/24"  # the API server's default; the kubernetes Service is 10.0.0.1
HUB = f"{NODE_NET}.254"
REGISTRY_PORT = 5000
REGISTRY = f"{HUB}:{REGISTRY_PORT}"
#: Registry hosts that job files and the chart name, all served by the local registry.
MIRRORED = (
    "docker.io", "registry-1.docker.io", "ghcr.io", "registry.k8s.io", "quay.io",
    "registry.baidubce.com",  # CCE's Horovod image, as CCE's job names it
    REGISTRY,
)  # fmt: skip
#: Extended resources every real node advertises, as a device plugin would: CCE's shared-GPU resources, which
#: the trainers of CCE's job request (cards, cores in percent, memory in GiB).
EXTENDED_RESOURCES = {
    "baidu.com/v100_32g_cgpu": "8",
    "baidu.com/v100_32g_cgpu_core": "800",
    "baidu.com/v100_32g_cgpu_memory": "256",
}
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
LABEL_REAL = "trainguard.io/real-node"
VOLCANO_SCHEDULER = "volcano"  # the schedulerName of the pods vc-scheduler places
#: vc-scheduler's actions and plugins: those of the configuration Volcano's installer deploys.
VOLCANO_SCHEDULER_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""
#: vc-controller-manager's controllers: the queue controller opens queues and keeps their status (the scheduler
#: places nothing from a queue that is not Open), the podgroup controller gives a PodGroup to a pod that names
#: the scheduler without one. Not the controllers of Volcano's own Job kinds, which nothing here creates.
VOLCANO_CONTROLLERS = "queue-controller,pg-controller"


def say(message: str) -> None:
    print(f"k8s-testcluster: {message}", file=sys.stderr, flush=True)


def run(*argv: str, check: bool = True, netns: str | None = None, quiet: bool = False) -> str:
    full = [*(["ip", "netns", "exec", netns] if netns else []), *argv]
    done = subprocess.run(full, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise SystemExit(f"k8s-testcluster: error: {' '.join(full)} failed: {done.stderr.strip()}")
    return done.stdout


class Cluster:
    def __init__(self, args: argparse.Namespace) -> None:
        self.name: str = args.cluster
        self.dir = Path(args.state)  # this cluster's real-node state
        self.kube_bin = Path(args.kube_bin)
        self.node_bin = Path(args.node_bin)
        self.pki = Path(args.pki)
        self.kubeconfig = Path(args.kubeconfig)
        self.registry_dir = Path(args.registry_dir)
        self.volcano_bin = Path(args.volcano_bin) if args.volcano_bin else None
        tag = hashlib.sha256(self.name.encode()).hexdigest()[:6]
        self.bridge = f"tg{tag}"  # interface names are at most 15 characters
        self.tag = tag

    # ---- names and paths
    def node_name(self, i: int) -> str:
        return f"{self.name}-node-{i}"

    def netns(self, i: int) -> str:
        return f"tg-{self.tag}-n{i}"

    def node_dir(self, i: int) -> Path:
        return self.dir / f"node-{i}"

    def cgroup_root(self, i: int) -> str:
        return f"/tg-{self.tag}-n{i}"

    def node_ip(self, i: int) -> str:
        return f"{NODE_NET}.{10 + i}"

    def pod_cidr(self, i: int) -> str:
        return f"{POD_NET}.{i}.0/24"

    def nodes(self) -> list[int]:
        return sorted(int(p.name.split("-")[1]) for p in self.dir.glob("node-*") if p.is_dir())

    # ---- processes
    def start(
        self, name: str, argv: list[str], netns: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        log = self.dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        full = [*(["nsenter", f"--net=/run/netns/{netns}"] if netns else []), *argv]
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                full,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
                pass_fds=(),
            )
        (self.dir / "pids").mkdir(exist_ok=True)
        (self.dir / "pids" / name).write_text(str(proc.pid))

    def running(self, name: str) -> bool:
        pid_file = self.dir / "pids" / name
        return pid_file.exists() and _alive(int(pid_file.read_text()))

    def stop(self, name: str) -> None:
        pid_file = self.dir / "pids" / name
        if not pid_file.exists():
            return
        pid = int(pid_file.read_text())
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pid_file.unlink()
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
        pid_file.unlink(missing_ok=True)

    # ---- up
    def up(self, count: int) -> None:
        started = time.monotonic()
        _install_packages()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.bridge_up()
        self.start_registry()
        self.start_dns()
        if self.volcano_bin:
            self.start_volcano()
        for i in range(1, count + 1):
            self.node_up(i, count)
        self.wait_ready(count)
        for i in range(1, count + 1):
            self.advertise(i)
        say(f"{count} real nodes are Ready in {time.monotonic() - started:.0f}s")
        if self.volcano_bin:
            self.wait_volcano()

    def advertise(self, i: int) -> None:
        """Node i's extended resources, in its status's capacity (the kubelet keeps what it does not manage)."""
        patch = [
            {"op": "add", "path": f"/status/capacity/{name.replace('/', '~1')}", "value": value}
            for name, value in EXTENDED_RESOURCES.items()
        ]
        self.kubectl(
            "patch", "node", self.node_name(i), "--subresource=status", "--type=json", "-p", json.dumps(patch)
        )

    def bridge_up(self) -> None:
        if run("ip", "link", "show", self.bridge, check=False, quiet=True):
            return
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{HUB}/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")

    def start_registry(self) -> None:
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "registry.yaml"
        config.write_text(
            "version: 0.1\n"
            "log: {level: warn}\n"
            f"storage: {{filesystem: {{rootdirectory: {self.registry_dir}}}, delete: {{enabled: true}}}}\n"
            f"http: {{addr: '{REGISTRY}'}}\n"
        )
        self.start("registry", [str(self.node_bin / "registry"), "serve", str(config)])
        _wait(lambda: _http_ok(f"http://{REGISTRY}/v2/"), 30, "the image registry to answer")

    def start_dns(self) -> None:
        corefile = self.dir / "Corefile"
        # No forward plugin: names outside the cluster get no answer from anywhere else.
        corefile.write_text(
            f".:53 {{\n  bind {HUB}\n  errors\n"
            f"  kubernetes cluster.local in-addr.arpa ip6.arpa {{\n"
            f"    kubeconfig {self.kubeconfig}\n    pods insecure\n    ttl 5\n"
            f"    fallthrough in-addr.arpa ip6.arpa\n  }}\n  cache 5\n}}\n"
        )
        self.start("coredns", [str(self.node_bin / "coredns"), "-conf", str(corefile)])

    def start_volcano(self) -> None:
        assert self.volcano_bin is not None
        d = self.dir / "volcano"
        d.mkdir(parents=True, exist_ok=True)
        crds = sorted((self.volcano_bin / "crds").glob("*.yaml"))
        # Server-side: no last-applied annotation, which some of Volcano's CRDs would outgrow.
        self.kubectl("apply", "--server-side", *(f"--filename={crd}" for crd in crds))
        self.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", *(f"--filename={crd}" for crd in crds)
        )
        # The queue "default" (where a PodGroup that names none goes) under the root of the hierarchy, "root", as
        # vc-scheduler makes them when they are missing: made first, the queue controller finds default's parent.
        queues = d / "queues.json"
        queues.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "List",
                    "items": [
                        {
                            "apiVersion": "scheduling.volcano.sh/v1beta1",
                            "kind": "Queue",
                            "metadata": {"name": name},
                            "spec": {"reclaimable": reclaimable, "weight": 1},
                        }
                        for name, reclaimable in (("root", False), ("default", True))
                    ],
                }
            )
        )
        self.kubectl("apply", "--server-side", f"--filename={queues}")
        # Its own directory: vc-scheduler watches the configuration's directory for changes.
        conf = d / "conf" / "scheduler.conf"
        conf.parent.mkdir(exist_ok=True)
        conf.write_text(VOLCANO_SCHEDULER_CONF)
        common = [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            f"--scheduler-name={VOLCANO_SCHEDULER}",
        ]
        if not self.running("vc-scheduler"):
            self.start(
                "vc-scheduler",
                [
                    str(self.volcano_bin / "vc-scheduler"),
                    *common,
                    f"--scheduler-conf={conf}",
                    "--default-queue=default",
                    f"--cache-dump-dir={d}",
                    "--v=2",
                ],
                # Where it serves its log-level socket (else a directory of /tmp that every cluster would share).
                env={"DEBUG_SOCKET_DIR": str(d / "sockets")},
            )
        if not self.running("vc-controller-manager"):
            self.start(
                "vc-controller-manager",
                [
                    str(self.volcano_bin / "vc-controller-manager"),
                    *common,
                    f"--controllers={VOLCANO_CONTROLLERS}",
                    "--v=2",
                ],
            )

    def wait_volcano(self) -> None:
        """Until the queue controller has opened the queue "default" and vc-scheduler has its caches filled."""
        log = self.dir / "logs" / "vc-scheduler.log"

        def ready() -> bool:
            for name in ("vc-scheduler", "vc-controller-manager"):
                if not self.running(name):
                    raise SystemExit(
                        f"k8s-testcluster: error: {name} exited; its log: {self.dir / 'logs' / (name + '.log')}"
                    )
            state = self.kubectl(
                "get",
                "queues.scheduling.volcano.sh",
                "default",
                "--output=jsonpath={.status.state}",
                check=False,
            )
            return state == "Open" and "Scheduler completes Initialization" in log.read_text(errors="replace")

        started = time.monotonic()
        _wait(ready, 120, f"Volcano's scheduler and queue controller (logs: {self.dir / 'logs'})")
        say(f"Volcano is ready in {time.monotonic() - started:.0f}s more")

    def node_up(self, i: int, count: int) -> None:
        ns, d = self.netns(i), self.node_dir(i)
        for sub in ("containerd", "kubelet", "pod-logs", "cni/net.d", "cni/data", "certs.d", "pki"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        if ns not in run("ip", "netns", "list"):
            run("ip", "netns", "add", ns)
            host_end, node_end = f"{self.bridge}h{i}", f"{self.bridge}n{i}"
            run("ip", "link", "del", host_end, check=False)  # left by a node whose namespace is gone
            run("ip", "link", "add", host_end, "type", "veth", "peer", "name", node_end)
            run("ip", "link", "set", host_end, "master", self.bridge, "up")
            run("ip", "link", "set", node_end, "netns", ns)
            run("ip", "link", "set", node_end, "name", "eth0", netns=ns)
            run("ip", "addr", "add", f"{self.node_ip(i)}/24", "dev", "eth0", netns=ns)
            run("ip", "link", "set", "eth0", "up", netns=ns)
            run("ip", "link", "set", "lo", "up", netns=ns)
            run("ip", "route", "add", "default", "via", HUB, netns=ns)
            run("sysctl", "-qw", "net.ipv4.ip_forward=1", netns=ns)
            run("sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1", netns=ns)
        # Pods of the other nodes are reached through those nodes; the machine reaches them all.
        for j in range(1, count + 1):
            if j != i:
                run("ip", "route", "replace", self.pod_cidr(j), "via", self.node_ip(j), netns=ns)
        run("ip", "route", "replace", self.pod_cidr(i), "via", self.node_ip(i))
        self.make_cgroup(self.cgroup_root(i))
        self.node_certs(i)
        self.write_containerd(i)
        self.start(
            f"containerd-{i}",
            [str(self.node_bin / "containerd"), "--config", str(d / "containerd.toml")],
            netns=ns,
            env={"PATH": f"{self.node_bin}:{os.environ['PATH']}"},
        )
        _wait(lambda: (d / "containerd.sock").exists(), 30, f"node {i}'s containerd")
        self.write_kubelet(i)
        self.start_kubelet(i)
        self.write_proxy(i)
        self.start(
            f"kube-proxy-{i}",
            [str(self.node_bin / "kube-proxy"), f"--config={d / 'kube-proxy.yaml'}"],
            netns=ns,
        )

    def start_kubelet(self, i: int) -> None:
        d = self.node_dir(i)
        self.start(
            f"kubelet-{i}",
            [
                str(self.node_bin / "kubelet"),
                f"--config={d / 'kubelet.yaml'}",
                f"--kubeconfig={d / 'kubelet.kubeconfig'}",
                f"--hostname-override={self.node_name(i)}",
                f"--node-ip={self.node_ip(i)}",
                f"--root-dir={d / 'kubelet'}",
                f"--cert-dir={d / 'pki'}",
                f"--node-labels={LABEL_REAL}=true",
                "--v=1",
            ],
            netns=self.netns(i),
        )

    def node_certs(self, i: int) -> None:
        d = self.node_dir(i)
        self.client_cert(d / "pki" / "kubelet-client", f"system:node:{self.node_name(i)}", "system:nodes")
        self.client_cert(d / "pki" / "kube-proxy", "system:kube-proxy", None)
        self.write_kubeconfig(d / "kubelet.kubeconfig", d / "pki" / "kubelet-client")
        self.write_kubeconfig(d / "kube-proxy.kubeconfig", d / "pki" / "kube-proxy")

    def client_cert(self, base: Path, cn: str, org: str | None) -> None:
        key, crt = base.with_suffix(".key"), base.with_suffix(".crt")
        if crt.exists():
            return
        subject = f"/CN={cn}" + (f"/O={org}" if org else "")
        run(
            "openssl",
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-subj",
            subject,
            "-out",
            str(base.with_suffix(".csr")),
        )
        run(
            "openssl",
            "x509",
            "-req",
            "-in",
            str(base.with_suffix(".csr")),
            "-CA",
            str(self.pki / "ca.crt"),
            "-CAkey",
            str(self.pki / "ca.key"),
            "-CAcreateserial",
            "-days",
            "365",
            "-out",
            str(crt),
        )

    def write_kubeconfig(self, path: Path, cert: Path) -> None:
        port = self.api_port()
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "c",
                            "cluster": {
                                "server": f"https://{HUB}:{port}",
                                "certificate-authority": str(self.pki / "ca.crt"),
                                # The serving certificate names the API server by these; the nodes reach it on the bridge.
                                "tls-server-name": "kubernetes.default.svc",
                            },
                        }
                    ],
                    "users": [
                        {
                            "name": "u",
                            "user": {
                                "client-certificate": str(cert.with_suffix(".crt")),
                                "client-key": str(cert.with_suffix(".key")),
                            },
                        }
                    ],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "c",
                }
            )
        )

    def api_port(self) -> int:
        for line in self.kubeconfig.read_text().splitlines():
            if "server:" in line:
                return int(line.rsplit(":", 1)[1])
        raise SystemExit(f"k8s-testcluster: error: no server in {self.kubeconfig}")

    def write_containerd(self, i: int) -> None:
        d = self.node_dir(i)
        (d / "cni" / "net.d" / "10-bridge.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "trainguard",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "cni0",
                            "isGateway": True,
                            "ipMasq": False,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "dataDir": str(d / "cni" / "data"),
                                "ranges": [[{"subnet": self.pod_cidr(i)}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                }
            )
        )
        for host in MIRRORED:
            hosts = d / "certs.d" / host
            hosts.mkdir(parents=True, exist_ok=True)
            # server too: were the mirror to fail, containerd falls back to it, and it must stay local.
            (hosts / "hosts.toml").write_text(
                f'server = "http://{REGISTRY}"\n\n[host."http://{REGISTRY}"]\n'
                '  capabilities = ["pull", "resolve"]\n  skip_verify = true\n'
            )
        runc = shutil.which("runc") or "/usr/sbin/runc"
        (d / "containerd.toml").write_text(f"""version = 3
root = "{d / "containerd" / "root"}"
state = "{d / "containerd" / "state"}"
[grpc]
  address = "{d / "containerd.sock"}"
[ttrpc]
  address = "{d / "containerd.sock"}.ttrpc"
[debug]
  address = ""
[plugins."io.containerd.cri.v1.runtime"]
  # This machine does not let a process lower its oom_score_adj (kubelet asks -998 for pod sandboxes).
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{d / "cni" / "net.d"}"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      BinaryName = "{runc}"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{d / "certs.d"}"
[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
""")

    def write_kubelet(self, i: int) -> None:
        d = self.node_dir(i)
        (d / "resolv.conf").write_text(f"nameserver {HUB}\n")
        (d / "kubelet.yaml").write_text(
            json.dumps(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    # This machine has cgroup v1, which Kubernetes 1.36 refuses unless told.
                    "failCgroupV1": False,
                    "failSwapOn": False,
                    "cgroupDriver": "cgroupfs",
                    "cgroupRoot": self.cgroup_root(i),
                    "containerRuntimeEndpoint": f"unix://{d / 'containerd.sock'}",
                    "address": self.node_ip(i),
                    "readOnlyPort": 0,
                    "healthzBindAddress": "127.0.0.1",
                    "authentication": {
                        "anonymous": {"enabled": False},
                        "webhook": {"enabled": False},
                        "x509": {"clientCAFile": str(self.pki / "ca.crt")},
                    },
                    "authorization": {"mode": "AlwaysAllow"},
                    "clusterDNS": [HUB],
                    "clusterDomain": "cluster.local",
                    "resolvConf": str(d / "resolv.conf"),
                    "podLogsDir": str(d / "pod-logs"),
                    "podCIDR": self.pod_cidr(i),
                    # Pod volumes (the downward API's nudge file among them) are refreshed on each sync.
                    "syncFrequency": "10s",
                    "serializeImagePulls": False,
                    "evictionHard": {
                        "memory.available": "100Mi",
                        "nodefs.available": "1%",
                        "imagefs.available": "1%",
                    },
                    "imageGCHighThresholdPercent": 100,
                    "imageGCLowThresholdPercent": 99,
                    "maxPods": 50,
                    "shutdownGracePeriod": "0s",
                    "localStorageCapacityIsolation": False,
                    "protectKernelDefaults": False,
                }
            )
        )

    def write_proxy(self, i: int) -> None:
        d = self.node_dir(i)
        (d / "kube-proxy.yaml").write_text(
            json.dumps(
                {
                    "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                    "kind": "KubeProxyConfiguration",
                    "clientConnection": {"kubeconfig": str(d / "kube-proxy.kubeconfig")},
                    "mode": "iptables",
                    "hostnameOverride": self.node_name(i),
                    "clusterCIDR": f"{POD_NET}.0.0/16",
                    # Pod to Service to a pod on the same bridge: the reply must come back through the node.
                    "iptables": {"masqueradeAll": True},
                    "conntrack": {"maxPerCore": 0, "min": 0},
                    "metricsBindAddress": "127.0.0.1:10249",
                    "healthzBindAddress": "127.0.0.1:10256",
                }
            )
        )

    def kubectl(self, *args: str, check: bool = True) -> str:
        return run(str(self.kube_bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args, check=check)

    def wait_ready(self, count: int) -> None:
        names = [self.node_name(i) for i in range(1, count + 1)]

        def ready() -> bool:
            out = self.kubectl("get", "nodes", "-o", "json", check=False)
            if not out:
                return False
            items = {n["metadata"]["name"]: n for n in json.loads(out)["items"]}
            return all(
                name in items
                and any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in items[name]["status"]["conditions"]
                )
                for name in names
            )

        try:
            _wait(ready, 120, f"nodes {', '.join(names)} to be Ready (logs: {self.dir / 'logs'})")
        except SystemExit:
            for log in sorted((self.dir / "logs").glob("*.log")):
                errors = [
                    line for line in log.read_text(errors="replace").splitlines() if line.startswith("E")
                ]
                for line in errors[-3:]:
                    say(f"{log.name}: {line[:300]}")
            raise

    # ---- down
    def down(self) -> None:
        if not self.dir.exists():
            return
        for name in ("vc-scheduler", "vc-controller-manager"):
            self.stop(name)
        for i in self.nodes():
            self.node_down(i)
        for name in ("coredns", "registry"):
            self.stop(name)
        if run("ip", "link", "show", self.bridge, check=False, quiet=True):
            run("ip", "link", "del", self.bridge, check=False)
        self.unmount_under(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)

    def node_down(self, i: int) -> None:
        self.stop(f"kubelet-{i}")
        self.stop(f"kube-proxy-{i}")
        # Every process of the node's pods: its cgroups (thawed first, a stopped node's are frozen), then the
        # shims, then containerd.
        self.freeze(i, False)
        self.kill_cgroup(self.cgroup_root(i))
        sock = str(self.node_dir(i) / "containerd.sock")
        for pid in _pids_with_arg(sock):
            _kill(pid)
        self.stop(f"containerd-{i}")
        self.kill_cgroup(self.cgroup_root(i))
        self.unmount_under(self.node_dir(i))
        self.remove_cgroup(self.cgroup_root(i))
        run("ip", "route", "del", self.pod_cidr(i), check=False)
        run("ip", "netns", "del", self.netns(i), check=False)
        run("ip", "link", "del", f"{self.bridge}h{i}", check=False)

    @staticmethod
    def make_cgroup(root: str) -> None:
        """The node's cgroup root, in every hierarchy (kubelet wants it there before it starts)."""
        for controller in Path("/sys/fs/cgroup").iterdir():
            top = controller / root.lstrip("/")
            if not controller.is_dir() or top.is_dir():
                continue
            top.mkdir()
            if controller.name.startswith("cpuset"):
                # A new cpuset has no CPUs and no memory nodes until given its parent's.
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (top / name).write_text((controller / name).read_text())

    def freeze(self, i: int, frozen: bool) -> None:
        """Freezes (or thaws) every process of node i's pods: the cgroup v1 freezer of the node's cgroup root."""
        state = Path("/sys/fs/cgroup/freezer").joinpath(self.cgroup_root(i).lstrip("/"), "freezer.state")
        if state.exists():
            state.write_text("FROZEN" if frozen else "THAWED")

    def stop_node(self, i: int) -> None:
        """As when a node dies: its kubelet stops, its pods' processes stop where they are (frozen) and its
        network goes quiet (its link to the bridge down: peers' packets go unanswered, as to a dead host)."""
        self.stop(f"kubelet-{i}")
        self.freeze(i, True)
        run("ip", "link", "set", f"{self.bridge}h{i}", "down")

    def start_node(self, i: int) -> None:
        run("ip", "link", "set", f"{self.bridge}h{i}", "up")
        self.freeze(i, False)
        self.start_kubelet(i)

    @staticmethod
    def kill_cgroup(root: str) -> None:
        """SIGKILL every process of the cgroups under ``root``. The kubelet and runc remove cgroups while
        this walks them: one gone meanwhile has no process left to kill."""
        for directory, _, files in os.walk(Path("/sys/fs/cgroup/pids").joinpath(root.lstrip("/"))):
            if "cgroup.procs" not in files:
                continue
            try:
                pids = Path(directory, "cgroup.procs").read_text().split()
            except FileNotFoundError:
                continue
            for pid in pids:
                _kill(int(pid))

    @staticmethod
    def remove_cgroup(root: str) -> None:
        for controller in Path("/sys/fs/cgroup").iterdir():
            top = controller / root.lstrip("/")
            if not top.is_dir():
                continue
            # Deepest first: a cgroup goes only once it has no children (and no processes).
            for sub in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()

    @staticmethod
    def unmount_under(base: Path) -> None:
        prefix = str(base.resolve()) + "/"
        for _ in range(3):
            mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
            ours = [m.replace("\\040", " ") for m in mounts if (m + "/").startswith(prefix)]
            if not ours:
                return
            for mount in sorted(ours, key=len, reverse=True):
                run("umount", "-l", mount, check=False)


#: What real nodes take from Debian's packages: a command (or file) each, and the package that has it.
PACKAGES = {
    "runc": "runc",
    "iptables": "iptables",
    "conntrack": "conntrack",
    "openssl": "openssl",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
}


def _install_packages() -> None:
    missing = [pkg for tool, pkg in PACKAGES.items() if not (Path(tool).exists() or shutil.which(tool))]
    if not missing:
        return
    say(f"installing Debian's {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", *missing]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True)
        done = subprocess.run(install, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(
                f"k8s-testcluster: error: cannot install {' '.join(missing)}: {done.stderr.strip()}"
            )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _pids_with_arg(arg: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if arg in proc.joinpath("cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _wait(condition, seconds: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"k8s-testcluster: error: gave up after {seconds:.0f}s waiting for {what}")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "verb", choices=["up", "down", "hub", "stop-kubelet", "start-kubelet", "stop-node", "start-node"]
    )
    parser.add_argument(
        "--node", type=int, default=0, help="stop-/start-kubelet, stop-/start-node: which node"
    )
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--kube-bin", required=True)
    parser.add_argument("--node-bin", default="")
    parser.add_argument("--pki", default="")
    parser.add_argument("--kubeconfig", default="")
    parser.add_argument("--registry-dir", default="")
    parser.add_argument("--volcano-bin", default="", help="up: start Volcano from these binaries and CRDs")
    parser.add_argument("--count", type=int, default=2)
    if sys.argv[1:] == ["hub"]:
        print(HUB)
        return
    args = parser.parse_args()
    cluster = Cluster(args)
    if args.verb == "up":
        cluster.up(args.count)
    elif args.verb == "down":
        cluster.down()
    elif args.node not in cluster.nodes():
        raise SystemExit(f"k8s-testcluster: error: no real node {args.node}; the nodes are {cluster.nodes()}")
    elif args.verb == "stop-kubelet":
        # As when a node's kubelet dies: its containers keep running, the node stops reporting.
        cluster.stop(f"kubelet-{args.node}")
    elif args.verb == "stop-node":
        cluster.stop_node(args.node)
    elif args.verb == "start-node":
        cluster.start_node(args.node)
    else:
        cluster.start_kubelet(args.node)


if __name__ == "__main__":
    main()
