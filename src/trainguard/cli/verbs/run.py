"""``trainguard run FILE``: submit jobs to the local runtime and follow them until they end.

Starts the local control plane when none runs. On a terminal the status block (phase, pods per role and
node, restarts, latest events) is redrawn in place; otherwise each change is printed as one plain line.
Exit status: 0 when every job Succeeded, 1 when one Failed or timed out; ``--detach`` returns at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from trainguard.backends.local import views
from trainguard.cli.errors import CliError
from trainguard.cli.progress import Progress
from trainguard.cli.verbs._local import add_overlay, call, load

#: How often the follower asks for the job's state.
POLL_SECONDS = 0.5
_REDRAWN_EVENTS = 6


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run jobs on this machine (local runtime) and follow them",
        description="Submit the jobs in FILE to the local runtime (starting its control plane when needed) "
        "and follow them until they end: exit 0 when all succeed, 1 when one fails.",
    )
    parser.add_argument("file", metavar="FILE", help="a job file (YAML or JSON, any supported dialect)")
    add_overlay(parser)
    parser.add_argument(
        "--nodes",
        type=_positive,
        metavar="N",
        help="virtual nodes to place pods on (default: one per pod at the job's largest, plus a spare)",
    )
    parser.add_argument("--detach", "-d", action="store_true", help="submit and return at once")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    jobs = load(args.file, args.overlay)
    names = []
    for loaded in jobs:
        result = call(
            "submit",
            spec=loaded.job.to_dict(),
            workdir=os.getcwd(),
            nodes=args.nodes,
            source=args.file,
        )
        names.append(result["name"])
        print(f"job {result['name']} submitted")
        if result.get("held"):  # too large for this machine: it waits (docs/local.md)
            print(f"warning: {result['held']}", file=sys.stderr)
    if args.detach:
        print(f"follow with: trainguard get {names[0]}   (logs: trainguard logs {names[0]})")
        return 0
    try:
        return follow(names, in_place=sys.stdout.isatty())
    except KeyboardInterrupt:
        print(f"\nstopped following; the job keeps running (trainguard get {names[0]})")
        return 130


def follow(names: list[str], in_place: bool) -> int:
    """Show the jobs until all of them ended; 0 when all succeeded."""
    printer = _InPlace() if in_place else _Plain()
    while True:
        finished: dict[str, str] = {}
        for name in names:
            view = call("get", job=name)
            events = call("events", job=name, limit=_REDRAWN_EVENTS if in_place else None)
            printer.show(view, events)
            if views.is_finished(view):
                finished[name] = view["status"]["phase"]
        if len(finished) == len(names):
            printer.close()
            for name, phase in finished.items():
                print(f"job {name} {phase}")
            return 0 if all(phase == "Succeeded" for phase in finished.values()) else 1
        time.sleep(POLL_SECONDS)


class _InPlace:
    """Redraws one block per job in place (``trainguard.cli.progress``)."""

    def __init__(self) -> None:
        self._progress = Progress(in_place=True, show_elapsed=False)

    def show(self, view: dict[str, Any], events: list[dict[str, Any]]) -> None:
        self._progress.update(views.redrawn_block(view, events, time.time()), key=view["metadata"]["name"])

    def close(self) -> None:
        self._progress.close()


class _Plain:
    """One line per change: phase changes and new events."""

    def __init__(self) -> None:
        self._phases: dict[str, str] = {}
        self._seen_events: dict[str, int] = {}

    def show(self, view: dict[str, Any], events: list[dict[str, Any]]) -> None:
        name = view["metadata"]["name"]
        for event in events[self._seen_events.get(name, 0) :]:
            print(
                f"{views.clock_time(event['time'])} {name} {event['reason']} {event['object']}: {event['message']}"
            )
        self._seen_events[name] = len(events)
        phase = view["status"]["phase"]
        if self._phases.get(name) != phase:
            self._phases[name] = phase
            print(views.summary_line(view, time.time()))
        sys.stdout.flush()

    def close(self) -> None:
        pass


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise CliError(f"--nodes {text!r}: give a whole number of nodes, 1 or more")
    return value
