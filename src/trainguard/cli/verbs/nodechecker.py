"""``trainguard node-checker [--period SECONDS] [--timeout SECONDS] [--once] [--print]``: check this node.

The node checker of the chart's DaemonSet (``nodeChecker.enabled``; the operator's ``--isolation-mode
node-checker``): every ``--period`` seconds it runs the fault tolerance check's items on the node it runs on
(the GPU items over every device NVML lists here; no GPU: skipped) and writes the result into its own pod's
annotation ``trainguard.io/node-check``, found through ``$POD_NAME`` and ``$POD_NAMESPACE``; the operator
isolates a node whose check found its hardware faulty. ``--print`` writes each result to stdout instead (one
JSON line; no API server needed), ``--once`` checks once and exits. See docs/faultcheck.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from trainguard.cli.errors import CliError
from trainguard.pod.checks import CheckResult


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "node-checker",
        help="check this node every --period seconds and publish the result (the chart's node checker)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    parser.add_argument(
        "--period", type=float, default=60.0, metavar="SECONDS", help="between two checks (60)"
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, metavar="SECONDS", help="the most one check takes (60)"
    )
    parser.add_argument("--once", action="store_true", help="check once, publish, and exit")
    parser.add_argument(
        "--print", dest="to_stdout", action="store_true", help="write each result to stdout, not to the pod"
    )
    parser.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig file (default: in-cluster, else ~/.kube/config)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.period <= 0 or not 0 < args.timeout <= 600:
        raise CliError(
            "--period takes a positive number of seconds, --timeout one up to 600, e.g. --period 60"
        )
    try:
        from trainguard.agent.checks.readings import Machine, injected_items
        from trainguard.backends.k8s import nodechecker
        from trainguard.backends.k8s.client import Kube
    except ImportError as error:
        raise CliError(
            f"the node checker needs the Kubernetes client ({error.name}): pip install 'trainguard[k8s]'"
        ) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    kube = None
    if args.to_stdout:

        def publish(result: CheckResult) -> None:
            print(json.dumps(result.as_dict(), separators=(",", ":")), flush=True)

    else:
        pod, namespace = (
            os.environ.get(nodechecker.ENV_POD_NAME),
            os.environ.get(nodechecker.ENV_POD_NAMESPACE),
        )
        if not pod or not namespace:
            raise CliError(
                f"no pod to publish to: ${nodechecker.ENV_POD_NAME} and ${nodechecker.ENV_POD_NAMESPACE} name "
                "the checker's own pod (the chart's DaemonSet sets them); or pass --print"
            )
        try:
            kube = Kube(args.kubeconfig)
        except Exception as error:
            raise CliError(f"cannot load the Kubernetes configuration: {error}") from None
        client = kube

        def publish(result: CheckResult) -> None:
            nodechecker.publish(client, namespace, pod, result)

    stop = threading.Event()

    def stopped(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, stopped)
    signal.signal(signal.SIGINT, stopped)
    readings = Machine()
    settings = nodechecker.node_settings(readings, args.period, args.timeout)
    print(
        f"[trainguard node-checker] checking every {args.period:g} s, {settings.gpus} GPU(s) found",
        file=sys.stderr,
        flush=True,
    )
    try:
        return nodechecker.run(settings, readings, publish, injected_items, stop, once=args.once)
    finally:
        if kube is not None:
            kube.close()
