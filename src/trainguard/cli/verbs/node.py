"""``trainguard node list`` and ``trainguard node release NODE``: the local runtime's virtual nodes, and those
a fault tolerance check isolated (no pod of any job is placed there until one is released).

``trainguard get nodes`` shows the same table as ``node list``. With ``--kubeconfig FILE``, the Kubernetes
cluster's nodes instead: ``list`` those a fault tolerance check isolated (taint ``trainguard.io/isolated``),
``release`` one (its taint, label and annotation removed).
"""

from __future__ import annotations

import argparse
from typing import Any

from trainguard.cli.verbs import _kube
from trainguard.cli.verbs._local import OUTPUTS, call, dump


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("node", help="list the local nodes, release an isolated one")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    actions.required = True
    listing = actions.add_parser("list", help="the nodes: slots, Ready, isolated and why, injected faults")
    listing.add_argument("-o", "--output", choices=OUTPUTS, help="json or yaml")
    release = actions.add_parser("release", help="release an isolated node: pods may be placed there again")
    release.add_argument("node", metavar="NODE", help="e.g. node-1 (see 'trainguard node list')")
    for sub in (listing, release):
        sub.add_argument(
            "--kubeconfig",
            metavar="FILE",
            help="a Kubernetes cluster's nodes instead of the local runtime's (list: the isolated ones)",
        )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.kubeconfig:
        if args.action == "release":
            print(_kube.node_release(args.kubeconfig, args.node))
        else:
            print(_kube.node_list(args.kubeconfig, getattr(args, "output", None)))
        return 0
    if args.action == "release":
        print(call("node-release", node=args.node))
        return 0
    print(nodes_text(getattr(args, "output", None)))
    return 0


def nodes_text(output: str | None) -> str:
    """The nodes as a table, or as json/yaml."""
    data = call("nodes")
    if output in ("json", "yaml"):
        return dump({"apiVersion": "v1", "kind": "List", "items": data}, output)
    rows = [("NAME", "SLOTS", "READY", "ISOLATED", "INJECTED FAULTS")]
    for node in data:
        rows.append(
            (
                node["name"],
                str(node["slots"]),
                "True" if node["ready"] else "False",
                node.get("isolated") or "-",
                ",".join(node.get("injected") or ()) or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "   ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)) + "   " + row[4]
        for row in rows
    )
