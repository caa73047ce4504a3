"""``trainguard apply FILE``: update submitted jobs (e.g. their replicas), or submit new ones.

The whole file is checked before anything is sent: a malformed file changes no job.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from trainguard.cli.verbs._local import add_overlay, call, load


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("apply", help="update local jobs from a file (e.g. new replicas)")
    parser.add_argument("file", metavar="FILE")
    add_overlay(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    jobs = load(args.file, args.overlay)
    for loaded in jobs:
        result = call("apply", spec=loaded.job.to_dict(), workdir=os.getcwd(), source=args.file)
        what = "created" if result.get("created") else "configured" if result.get("changed") else "unchanged"
        print(f"job {result['name']} {what}")
    return 0
