"""The ``trainguard`` command. Each verb lives in ``trainguard.cli.verbs.<verb>`` and is found at start-up.

A verb module defines ``register(subparsers) -> None``, which adds its parser and sets ``func`` to a
callable ``(args) -> int``. Errors a user can act on are raised as ``CliError`` or ``SpecError`` and printed
as one clear message with exit status 2; nothing else reaches the user as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

from trainguard import __version__
from trainguard.api import SpecError
from trainguard.cli import verbs
from trainguard.cli.errors import CliError

#: Exit status for bad input (a spec error, a bad argument, an unknown job).
EXIT_USAGE = 2
#: Exit status for a bug of ours; the message asks for TRAINGUARD_DEBUG=1 to see the traceback.
EXIT_INTERNAL = 70


class _Parser(argparse.ArgumentParser):
    """argparse that exits with status 2 and one line, like every other input error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CliError(f"{self.prog}: {message} (see '{self.prog} --help')")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Every verb's parser; only the named verb's where ``argv`` starts with one (``trainguard operator ...``
    then imports the operator's modules and not, say, the simulator's: a long-running verb starts lighter)."""
    parser = _Parser(prog="trainguard", description="Keeps distributed training jobs alive.")
    parser.add_argument("--version", action="version", version=f"trainguard {__version__}")
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    names = sorted(m.name for m in pkgutil.iter_modules(verbs.__path__) if not m.name.startswith("_"))
    # A verb's module is its name without hyphens (``node-checker``: ``nodechecker``).
    named = argv[0].replace("-", "") if argv and not argv[0].startswith("-") else None
    for name in [named] if named in names else names:
        importlib.import_module(f"{verbs.__name__}.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        return int(args.func(args))
    except SpecError as error:
        print(f"error: {error}" if len(error.problems) == 1 else f"error:\n{error}", file=sys.stderr)
        return EXIT_USAGE
    except CliError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as error:
        if os.environ.get("TRAINGUARD_DEBUG"):
            raise
        print(
            f"internal error: {type(error).__name__}: {error}\n"
            "This is a bug in trainguard; run again with TRAINGUARD_DEBUG=1 for the traceback.",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
