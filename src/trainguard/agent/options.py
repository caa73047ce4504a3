"""The agent's command line, shared by ``trainguard agent`` and ``python -m trainguard.agent``."""

from __future__ import annotations

import argparse
import os
import re

from trainguard.agent.config import AgentConfig

USAGE = "%(prog)s [options] -- CMD [ARG...]"
DESCRIPTION = (
    "Run CMD and supervise it: relay its output, forward signals, pass its exit status through, reap its "
    "whole process tree and, with --hang-timeout, restart it in place when it hangs. Each option falls back "
    "to an environment variable (TRAINGUARD_HANG_TIMEOUT, TRAINGUARD_HANG_MAX_CONSECUTIVE, "
    "TRAINGUARD_HANG_SIGNALS, TRAINGUARD_HANG_GRACE, TRAINGUARD_REPORT_FILE, TRAINGUARD_TERMINATION_LOG, "
    "TRAINGUARD_CONTROL_FILE, TRAINGUARD_NUDGE_FILE, TRAINGUARD_RELEASE_FILE, TRAINGUARD_LEASE_URL, "
    "TRAINGUARD_FENCE_AFTER). "
    "Exit status: CMD's (128+N when killed by signal N); 137 after giving up on a hang; 127/126 when CMD "
    "cannot be found/run; N when the runtime asked for exit code N through --control; 75 when it ended the "
    "command because it could not renew its lease (--fence-after)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hang-timeout",
        metavar="SECONDS",
        help="a hang is this long without progress; without it the agent only supervises",
    )
    parser.add_argument(
        "--max-consecutive",
        metavar="N",
        help="hang restarts in place in a row before giving up (3); progress resets the count",
    )
    parser.add_argument(
        "--signals",
        metavar="LIST",
        help="what counts as progress, comma-separated: heartbeat,log,cpu,io (default heartbeat,log,cpu); heartbeats take over "
        "as soon as the command sends one",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        default=None,
        help="with --hang-timeout: report a hang as suspected (and its end), never stop the command",
    )
    parser.add_argument(
        "--grace", metavar="SECONDS", help="between SIGTERM and SIGKILL when stopping the command (10)"
    )
    parser.add_argument("--report", metavar="FILE", help="append JSON-lines reports of what happens to FILE")
    parser.add_argument(
        "--termination-log",
        metavar="FILE",
        help="write the final status here (default /dev/termination-log when it exists and is writable)",
    )
    parser.add_argument(
        "--control",
        metavar="FILE",
        help='requests from the runtime: {"exit_code": N} ends the pod with status N (chaos kill --exit-code)',
    )
    parser.add_argument(
        "--nudge-file",
        metavar="FILE",
        help="'<token> <unix time>' from the runtime: another pod failed then; SIGKILL the command's workers "
        "started before it so that torchrun restarts them into a new round",
    )
    parser.add_argument(
        "--release-file",
        metavar="FILE",
        help="'<token> <address>[,<address>...]' from the runtime: a peer pod at those addresses is lost; "
        "shut down the connections of the pod's processes to it so that they stop waiting on it",
    )
    parser.add_argument(
        "--report-url",
        metavar="URL",
        help="POST a summary of what happens in the pod (hangs, restarts) to the operator at URL",
    )
    parser.add_argument(
        "--report-token", metavar="FILE", help="the bearer token for --report-url, read for every POST"
    )
    parser.add_argument(
        "--lease-url",
        metavar="URL",
        help="fencing: renew the pod's lease with the operator at URL (with the --report-token)",
    )
    parser.add_argument(
        "--fence-after",
        metavar="SECONDS",
        help="fencing: end the command's whole tree when no renewal at --lease-url succeeded for SECONDS, or "
        "at once when the operator says the pod is gone; the command starts after the first renewal",
    )
    parser.add_argument(
        "--env",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="set NAME for the command and the agent, unless the environment has it already (the runtime's "
        "variables for trainguard's own parts: the pod's own variables win, as in its env); repeatable",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command to run")


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    """Raises ValueError with a message for the user. The ``--env`` variables join this process's environment
    (under what it has already): the agent's settings fall back to them, and the command inherits them."""
    for name, value in carried(args.env).items():
        os.environ.setdefault(name, value)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    return AgentConfig.resolve(
        command,
        hang_timeout=args.hang_timeout,
        max_consecutive=args.max_consecutive,
        signals=args.signals,
        report_only=args.report_only,
        grace=args.grace,
        report=args.report,
        termination_log=args.termination_log,
        control=args.control,
        nudge_file=args.nudge_file,
        release_file=args.release_file,
        report_url=args.report_url,
        report_token=args.report_token,
        lease_url=args.lease_url,
        fence_after=args.fence_after,
    )


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def carried(pairs: list[str]) -> dict[str, str]:
    """``--env NAME=VALUE`` options as a mapping (the last of a name wins); ValueError naming the bad one."""
    carried: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not _NAME.match(name):
            raise ValueError(
                f"--env {pair!r}: expected NAME=VALUE, NAME a variable's name (letters, digits, _)"
            )
        carried[name] = value
    return carried
