"""``trainguard get [JOB] [-o json|yaml|wide]``: jobs of the local runtime and their pods; ``trainguard get
nodes``: its nodes (``trainguard node list``).

``get JOB -o json`` prints the job as a resource: ``status.phase``, ``status.conditions``,
``status.restartCounts`` (per role: relaunches), ``status.hangRestartCounts`` (per role: hang restarts in
place, which are not restarts), ``status.replicas`` (per role, now), ``status.pods`` (name, role, index, node,
phase, restarts, hangRestarts) and ``status.history``. The tables show both counts in columns of their own,
RESTARTS and HANG-RESTARTS.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from trainguard.backends.local import views
from trainguard.cli.verbs._local import OUTPUTS, call, dump
from trainguard.cli.verbs.node import nodes_text


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("get", help="list local jobs, or show one job and its pods")
    parser.add_argument("job", metavar="JOB", nargs="?", help="a job name (all jobs when left out)")
    parser.add_argument("-o", "--output", choices=OUTPUTS, help="json, yaml, or a wide table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.job == "nodes":  # the nodes, as ``trainguard node list`` (a job named "nodes": describe it)
        print(nodes_text(args.output if args.output in ("json", "yaml") else None))
        return 0
    data = call("get", job=args.job)
    if args.output in ("json", "yaml"):
        print(dump(data if args.job else {"apiVersion": "v1", "kind": "List", "items": data}, args.output))
        return 0
    wide = args.output == "wide"
    if args.job is None:
        print(views.jobs_table(data, time.time(), wide) if data else "no jobs")
        return 0
    print(views.summary_line(data, time.time()))
    print(views.pods_table(data, wide))
    return 0
