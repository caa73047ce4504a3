"""``trainguard chaos ...``: inject the faults trainguard recovers from, into local pods and nodes.

- ``kill POD [--signal S | --exit-code N]``: the pod's training command dies by signal S (default SIGKILL)
  or ends with exit code N (the command is SIGKILLed and the pod reports N; see docs/local.md);
- ``node-down NODE`` / ``node-up NODE``: the node goes NotReady, its pods' processes die with it / it returns;
- ``force-delete POD``: the pod disappears without trainguard asking;
- ``evict POD``: SIGTERM, grace period, SIGKILL; the pod ends with reason Evicted;
- ``hang POD``: SIGSTOP the training processes (not the agent, which then detects the hang);
- ``hardware-fault NODE [--item ITEM]``: the fault tolerance checks of the pods on the node read ITEM (default
  gpu.ecc) as faulty: a new pod's pre-check fails there, a running pod's periodic check ends it (a test aid:
  nothing is broken, the checks are told so); ``hardware-repair NODE`` undoes it. With ``--kubeconfig FILE
  [-n NS]``, on a Kubernetes cluster whose operator runs with ``--fault-injection``: the ConfigMap
  ``trainguard-fault-injection`` of namespace NS (default ``default``) says so to its pods.
"""

from __future__ import annotations

import argparse
from typing import Any

from trainguard.cli.errors import CliError
from trainguard.cli.verbs import _kube
from trainguard.cli.verbs._local import call
from trainguard.pod.checks import ITEMS


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("chaos", help="inject faults into local pods and nodes")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    actions.required = True
    kill = actions.add_parser("kill", help="kill a pod's training command (signal or exit code)")
    kill.add_argument("pod", metavar="POD", help="<job>-<role>-<index>")
    how = kill.add_mutually_exclusive_group()
    how.add_argument("--signal", "-s", metavar="S", help="signal name or number (default SIGKILL)")
    how.add_argument("--exit-code", type=_exit_code, metavar="N", help="make the pod end with exit code N")
    kill.add_argument(
        "--worker",
        action="store_true",
        help="kill one training process alone (a worker that crashed), not the pod's whole command",
    )
    for name, text in (
        ("force-delete", "remove a pod without trainguard's intent (grace 0)"),
        ("evict", "evict a pod (SIGTERM, grace, SIGKILL; reason Evicted)"),
        ("hang", "stop a pod's training processes with SIGSTOP"),
    ):
        sub = actions.add_parser(name, help=text)
        sub.add_argument("pod", metavar="POD", help="<job>-<role>-<index>")
    for name, text in (
        ("node-down", "take a virtual node down: NotReady, its pods' processes die"),
        ("node-up", "bring a virtual node back"),
        ("hardware-fault", "make the fault tolerance checks on a node read an item as faulty"),
        ("hardware-repair", "undo hardware-fault on a node"),
    ):
        sub = actions.add_parser(name, help=text)
        sub.add_argument("node", metavar="NODE", help="e.g. node-1 (see 'trainguard get nodes')")
        if name == "hardware-fault":
            sub.add_argument(
                "--item", metavar="ITEM", help=f"the check item (default gpu.ecc): {', '.join(ITEMS)}"
            )
        if name.startswith("hardware-"):
            sub.add_argument(
                "--kubeconfig",
                metavar="FILE",
                help="on a Kubernetes cluster (its operator runs with --fault-injection) instead of locally",
            )
            sub.add_argument(
                "-n",
                "--namespace",
                default="default",
                help="with --kubeconfig: the pods' namespace (default)",
            )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "kubeconfig", None):
        if args.action == "hardware-fault":
            print(_kube.hardware_fault(args.kubeconfig, args.namespace, args.node, args.item))
        else:
            print(_kube.hardware_repair(args.kubeconfig, args.namespace, args.node))
        return 0
    target = getattr(args, "pod", None) or args.node
    message = call(
        "chaos",
        action=args.action,
        target=target,
        signal=getattr(args, "signal", None),
        exit_code=getattr(args, "exit_code", None),
        item=getattr(args, "item", None),
        **({"worker": True} if getattr(args, "worker", False) else {}),
    )
    print(message)
    return 0


def _exit_code(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 255:
        raise CliError(f"--exit-code {text!r}: exit codes are 0-255")
    return value
