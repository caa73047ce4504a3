"""``trainguard describe JOB``: what happened to a job and why.

The spec in short, the conditions, per-role restart and hang restart counts, every pod, the fault-recovery
history (each fault with the rule that matched, the action, whether it counted and how long recovery took)
and events.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from trainguard.backends.local import views
from trainguard.cli.verbs._local import call


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("describe", help="show a job's conditions, restarts, history and events")
    parser.add_argument("job", metavar="JOB")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    view = call("get", job=args.job)
    events = call("events", job=args.job, limit=50)
    print(views.describe(view, events, time.time()))
    return 0
