"""``trainguard operator [--namespace NS] [--kubeconfig FILE]``: run the Kubernetes operator.

It serves trainingjobs.trainguard.io and aitrainingjobs.kongming.cce.baiudbce.com (install their CRDs first:
``trainguard crd | kubectl apply -f -``), and pytorchjobs.kubeflow.org with ``--pytorchjobs``. Several
replicas may run: they elect a leader through a Lease. See docs/operator.md.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from trainguard.cli.errors import CliError
from trainguard.policy.fencing import DEFAULT_SECONDS as DEFAULT_FENCE_SECONDS
from trainguard.policy.fencing import MIN_SECONDS as MIN_FENCE_SECONDS
from trainguard.policy.fencing import fencing_of


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "operator",
        help="run the Kubernetes operator (TrainingJob and AITrainingJob resources)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    parser.add_argument("--namespace", metavar="NS", help="watch only this namespace (default: all)")
    parser.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig file (default: in-cluster, else ~/.kube/config)"
    )
    parser.add_argument(
        "--scheduler-name",
        metavar="NAME",
        help="schedulerName for every pod, replacing the templates' (e.g. default-scheduler when the "
        "templates name volcano and the cluster has none)",
    )
    parser.add_argument(
        "--agent-image",
        metavar="IMAGE",
        default=None,
        help="the image that holds the agent every pod runs under (default: ghcr.io/trainguard/agent:VERSION, "
        "a few MB; the operator's image holds it too); the pods' own images need only python3",
    )
    parser.add_argument(
        "--agent-delivery",
        choices=("auto", "image-volume", "init-container"),
        default="auto",
        help="how the agent gets into each pod: the agent image mounted as an image volume (Kubernetes 1.35 "
        "or later, containerd 2.1 or CRI-O 1.31 or later on the nodes), or copied in by an init container "
        "(any cluster); auto (the default): the image volume where every node supports it, as its status "
        "says, else the init container",
    )
    parser.add_argument(
        "--barrier-image",
        metavar="IMAGE",
        default=None,
        help="run CCE's job barrier (init containers of registry.baidubce.com/cce-plugin-dev/jobbarrier) with "
        "this image's `trainguard barrier` instead: the operator's own, where CCE's registry is not reachable "
        "(the chart's default); unset: CCE's image as the template names it",
    )
    parser.add_argument("--pytorchjobs", action="store_true", help="also serve pytorchjobs.kubeflow.org")
    parser.add_argument(
        "--workers",
        type=int,
        default=4,
        help="jobs reconciled at once (4), within --requests-in-flight",
    )
    parser.add_argument(
        "--requests-in-flight",
        type=int,
        default=20,
        metavar="N",
        help="requests out to the API server at once, from all the operator's threads together (20; watches and "
        "the leader election's renewals aside); 0: no bound",
    )
    parser.add_argument(
        "--lease-namespace",
        default=None,
        help="namespace of the leader-election Lease (default: NS or default)",
    )
    parser.add_argument("--id", default="", help="this replica's identity in the Lease (default: host-pid)")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics on PORT (0: any free port; default: off)",
    )
    parser.add_argument(
        "--metrics-address",
        default="127.0.0.1",
        metavar="ADDR",
        help="address for the metrics (127.0.0.1; the Deployment uses 0.0.0.0 so Prometheus can scrape the pod)",
    )
    parser.add_argument(
        "--agent-report-port",
        type=int,
        default=None,
        metavar="PORT",
        help="take the agents' reports of what happens inside their pods (hangs restarted in place, workers "
        "restarted by torchrun) on PORT (default: off)",
    )
    parser.add_argument(
        "--agent-report-address",
        default="127.0.0.1",
        metavar="ADDR",
        help="address for the agents' reports (127.0.0.1; in a cluster 0.0.0.0, behind the operator's Service)",
    )
    parser.add_argument(
        "--agent-report-url",
        default=None,
        metavar="URL",
        help="the URL the pods' agents POST their reports to, as reached from the pods, e.g. "
        "http://trainguard-operator.trainguard-system.svc:8081/v1/agent-report (default: the agents report "
        "nothing but their end)",
    )
    parser.add_argument(
        "--fence-seconds",
        type=float,
        default=DEFAULT_FENCE_SECONDS,
        metavar="SECONDS",
        help="fencing, with --agent-report-url: a pod on a node that is not Ready is replaced SECONDS after "
        "the operator's decision, and every pod's agent ends its workers by itself when it cannot renew its "
        f"lease with the operator for SECONDS less a margin ({DEFAULT_FENCE_SECONDS:g}: 90 s; at least "
        f"{MIN_FENCE_SECONDS:g}; 0: off, replaced at once)",
    )
    parser.add_argument(
        "--ui-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve the job pages on PORT (0: any free port; default: off); reach them with kubectl port-forward",
    )
    parser.add_argument(
        "--ui-address", default="127.0.0.1", metavar="ADDR", help="address for the job pages (127.0.0.1)"
    )
    parser.add_argument(
        "--ui-token-file",
        default=None,
        metavar="FILE",
        help="the secret that lets a browser act (scale) on the job pages: open /?token=SECRET (default: a "
        "random one, in the log; the chart mounts its Secret <release>-ui here)",
    )
    parser.add_argument(
        "--no-release-survivors",
        dest="release_survivors",
        action="store_false",
        help="do not close the connections of a Horovod job's pods to a lost trainer (they then wait for "
        "Horovod's Gloo timeout before the elastic reset, as without trainguard; the job's history says so)",
    )
    parser.add_argument(
        "--reissue-priority-class",
        default=None,
        metavar="NAME",
        help="the PriorityClass of a pod issued again after a failed fault tolerance check: ahead of the "
        "scheduler's queue (the chart makes one, trainguard-reissued, with preemptionPolicy Never)",
    )
    isolating = parser.add_mutually_exclusive_group()
    isolating.add_argument(
        "--isolation-mode",
        choices=("agents", "node-checker", "off"),
        default="agents",
        help="whose fault tolerance checks may isolate a node: agents (the default: a job's pod's own check, "
        "for the node the pod was bound to, within the check's bounds), node-checker (only the chart's node "
        "checker DaemonSet: a job's own checks issue their pods again elsewhere and isolate nothing), off",
    )
    isolating.add_argument(
        "--no-isolation",
        dest="isolation_mode",
        action="store_const",
        const="off",
        help="never isolate a node (--isolation-mode off): pods of failed checks are still issued again elsewhere",
    )
    parser.add_argument(
        "--node-checker-namespace",
        default=None,
        metavar="NS",
        help="with --isolation-mode node-checker: the node checker's namespace (default: the Lease's)",
    )
    parser.add_argument(
        "--node-checker-name",
        default=None,
        metavar="NAME",
        help="with --isolation-mode node-checker: its DaemonSet's and ServiceAccount's name, both NAME; only "
        "the pods of that DaemonSet under that ServiceAccount are trusted (default: trainguard-node-checker)",
    )
    parser.add_argument(
        "--node-checker-max-isolated-share",
        type=float,
        default=0.1,
        metavar="SHARE",
        help="with --isolation-mode node-checker: the node checker isolates at most this share of the "
        "cluster's nodes, at least one (0.1)",
    )
    parser.add_argument(
        "--isolation-cooldown",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="release an isolated node on probation after SECONDS (doubled each time it is isolated again; "
        "its next pod's pre-check is its re-check); default 0: isolated until trainguard node release",
    )
    parser.add_argument(
        "--fault-injection",
        action="store_true",
        help="a test aid, never for production: every pod mounts the ConfigMap trainguard-fault-injection of "
        "its namespace (if it exists), whose key NODE lists the check items that read as faulty on that node "
        "(trainguard chaos hardware-fault NODE --kubeconfig FILE)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every reconcile")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainguard.backends.k8s import arenas

    malloc_arenas = arenas.cap()  # before any thread starts
    try:
        from trainguard.backends.k8s import manifests
        from trainguard.backends.k8s.client import Kube
        from trainguard.backends.k8s.delivery import DEFAULT_AGENT_IMAGE, AgentDelivery
        from trainguard.backends.k8s.kinds import DEFAULT_KINDS, PYTORCHJOB
        from trainguard.backends.k8s.nodechecker import DEFAULT_NAME, NodeChecker
        from trainguard.backends.k8s.operator import Operator, Options
        from trainguard.controller.backend import IsolationMode
    except ImportError as error:
        raise CliError(
            f"the operator needs the Kubernetes client ({error.name}): pip install 'trainguard[k8s]'"
        ) from None
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger(__name__).info("malloc arenas: %s", malloc_arenas)
    if args.requests_in_flight < 0:
        raise CliError(
            f"--requests-in-flight: {args.requests_in_flight} is negative; give the requests the operator may have "
            "out at once (20 by default), or 0 for no bound"
        )
    if not 0 < args.node_checker_max_isolated_share <= 1:
        raise CliError(
            f"--node-checker-max-isolated-share: {args.node_checker_max_isolated_share:g} is not a share of the "
            "nodes; give a number above 0 and at most 1, e.g. 0.1"
        )
    try:
        kube = Kube(args.kubeconfig)
    except Exception as error:
        raise CliError(f"cannot load the Kubernetes configuration: {error}") from None
    kinds = (*DEFAULT_KINDS, PYTORCHJOB) if args.pytorchjobs else DEFAULT_KINDS
    url = args.agent_report_url
    if url is not None and not url.startswith(("http://", "https://")):
        raise CliError(
            f"--agent-report-url: expected an http:// or https:// URL the pods can reach, got {url!r}"
        )
    if args.isolation_cooldown < 0:
        raise CliError(
            f"--isolation-cooldown: {args.isolation_cooldown:g} is negative; give the seconds an isolated node waits "
            "before its release on probation, or 0 to keep it isolated until trainguard node release"
        )
    try:
        fencing = fencing_of(args.fence_seconds)
    except ValueError as error:
        raise CliError(f"--fence-seconds: {error}") from None
    if fencing is not None and url is None:
        logging.getLogger(__name__).warning(
            "fencing is off: it needs --agent-report-url (the agents renew their leases there); a pod on a node "
            "that is not Ready is replaced at once"
        )
    secret = None
    if args.ui_token_file is not None:
        try:
            secret = Path(args.ui_token_file).read_text().strip()
        except OSError as error:
            raise CliError(f"--ui-token-file {args.ui_token_file}: {error.strerror or error}") from None
        if not secret:
            raise CliError(f"--ui-token-file {args.ui_token_file}: the file is empty; put the secret in it")
    options = Options(
        namespace=args.namespace,
        kinds=kinds,
        pod_settings=manifests.PodSettings(
            scheduler=args.scheduler_name,
            agent_image=args.agent_image or DEFAULT_AGENT_IMAGE,
            agent_delivery=AgentDelivery(args.agent_delivery),
            report_url=url,
            release_survivors=args.release_survivors,
            reissue_priority_class=args.reissue_priority_class,
            isolation=IsolationMode(args.isolation_mode),
            fault_injection=args.fault_injection,
            barrier_image=args.barrier_image or None,
            fencing=fencing,
        ),
        workers=max(args.workers, 1),
        requests_in_flight=args.requests_in_flight if args.requests_in_flight > 0 else None,
        lease_namespace=args.lease_namespace or args.namespace or "default",
        identity=args.id,
        metrics_port=args.metrics_port,
        metrics_address=args.metrics_address,
        agent_report_port=args.agent_report_port,
        agent_report_address=args.agent_report_address,
        ui_port=args.ui_port,
        ui_address=args.ui_address,
        ui_secret=secret,
        isolation_cooldown=args.isolation_cooldown,
        node_checker=NodeChecker(
            namespace=args.node_checker_namespace or args.lease_namespace or args.namespace or "default",
            name=args.node_checker_name or DEFAULT_NAME,
            max_isolated_share=args.node_checker_max_isolated_share,
        ),
    )
    if args.pytorchjobs:
        check_pytorchjob_crd(kube)
    operator = Operator(kube, options)
    stopped = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    operator.start()
    try:
        stopped.wait()
    finally:
        operator.stop()
        kube.close()
    return 0


def check_pytorchjob_crd(kube: Any) -> None:
    """Refuse to serve PyTorchJobs whose CRD drops the status the operator keeps (Kubeflow's own CRD has a
    status schema of Kubeflow's fields: the restart counts and pods would be pruned at every write, and every
    fault forgotten)."""
    from trainguard.api.crd import keeps_status
    from trainguard.backends.k8s.client import ApiError
    from trainguard.backends.k8s.kinds import PYTORCHJOB

    name = f"{PYTORCHJOB.plural}.{PYTORCHJOB.group}"
    try:
        crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    except (ApiError, OSError) as error:
        # Not installed yet (the operator waits for it), or no right to read it: nothing to check.
        logging.getLogger(__name__).warning("cannot check the CRD %s (%s)", name, error)
        return
    if not keeps_status(crd, PYTORCHJOB.version):
        raise CliError(
            f"--pytorchjobs: the CRD {name} on this cluster (Kubeflow's own, as its training operator installs "
            "it) has a status schema that drops the status trainguard keeps (restart counts, pods, history). "
            f"Replace it with trainguard's (same spec, every field kept): trainguard crd --dialect pytorchjob | "
            "kubectl replace -f -  (and do not run Kubeflow's training operator on the same PyTorchJobs)"
        )
