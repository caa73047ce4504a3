"""``trainguard agent [options] -- CMD...``: supervise a training command inside its pod.

The local runtime starts every pod through it and the Kubernetes operator makes it the container's
entrypoint; see ``trainguard.agent`` and docs/agent.md.
"""

from __future__ import annotations

import argparse
from typing import Any

from trainguard.agent import Agent
from trainguard.agent.options import DESCRIPTION, USAGE, add_arguments, config_from_args
from trainguard.cli.errors import CliError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "agent",
        help="run a command under the in-pod agent (hang detection, restart in place, reports)",
        usage=USAGE,
        description=DESCRIPTION,
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
    except ValueError as error:
        raise CliError(f"trainguard agent: {error}") from None
    return Agent(config).run()
