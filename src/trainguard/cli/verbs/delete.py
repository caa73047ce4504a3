"""``trainguard delete JOB``: stop a job's pods and forget the job (its logs too)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from trainguard.cli.errors import CliError
from trainguard.cli.verbs._local import call

#: How long to wait for the pods to stop (they get their grace period, then SIGKILL).
WAIT_SECONDS = 120.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("delete", help="delete a local job and stop its pods")
    parser.add_argument("job", metavar="JOB")
    parser.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True, help="wait until gone")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    call("delete", job=args.job)
    deadline = time.monotonic() + WAIT_SECONDS
    while args.wait and call("exists", job=args.job):
        if time.monotonic() > deadline:
            raise CliError(f"job {args.job}: pods still stopping after {WAIT_SECONDS:.0f} s", exit_code=1)
        time.sleep(0.2)
    print(f"job {args.job} deleted")
    return 0
