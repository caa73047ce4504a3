"""``python -m trainguard.agent [options] -- CMD...``: the agent without the rest of the CLI (starts faster)."""

from __future__ import annotations

import argparse
import sys

from trainguard.agent.options import DESCRIPTION, USAGE, add_arguments, config_from_args
from trainguard.agent.supervisor import Agent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainguard.agent", usage=USAGE, description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return Agent(config).run()


if __name__ == "__main__":
    sys.exit(main())
