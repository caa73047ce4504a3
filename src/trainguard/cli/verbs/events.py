"""``trainguard events JOB``: the job's events, oldest first (what the controller and the runtime did)."""

from __future__ import annotations

import argparse
from typing import Any

from trainguard.backends.local import views
from trainguard.cli.verbs._local import call, dump


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("events", help="list a job's events")
    parser.add_argument("job", metavar="JOB")
    parser.add_argument("-o", "--output", choices=("json", "yaml"), help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    events = call("events", job=args.job)
    if args.output:
        print(dump(events, args.output))
    else:
        print(views.events_table(events) if events else "no events")
    return 0
