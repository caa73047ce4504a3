"""``trainguard scale JOB --role R --replicas N``: change how many pods an elastic role has.

N must lie in the role's [minReplicas, maxReplicas]; otherwise nothing changes and the command says why.
"""

from __future__ import annotations

import argparse
from typing import Any

from trainguard.cli.errors import CliError
from trainguard.cli.verbs._local import call


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("scale", help="scale a role of a running job within [min, max]")
    parser.add_argument("job", metavar="JOB")
    parser.add_argument("--role", required=True, help="the role to scale (e.g. trainer, worker)")
    parser.add_argument("--replicas", required=True, type=_count, metavar="N", help="the new number of pods")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = call("scale", job=args.job, role=args.role, replicas=args.replicas)
    print(f"job {result['name']}: role {result['role']} scaling to {result['replicas']}")
    return 0


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise CliError(f"--replicas {text!r}: give a whole number, 0 or more")
    return value
