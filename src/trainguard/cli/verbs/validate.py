"""``trainguard validate FILE... [--overlay F] [-o json]``: check job files, one line per job."""

from __future__ import annotations

import argparse
from typing import Any

from trainguard.api.errors import SpecError, SpecProblem
from trainguard.api.load import LoadedJob
from trainguard.cli.verbs._jobfiles import add_overlay_argument, as_json, load_files
from trainguard.controller.launchspec import launch_refusal


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "validate",
        help="check job files (TrainingJob, AITrainingJob, PyTorchJob) and show their roles",
        description="Check job files. Prints one line per job: its name, its dialect, and each role with "
        "its replicas and [min-max]. Exit status 2 and one message per problem if any file is invalid.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML or JSON job file; - reads stdin")
    add_overlay_argument(parser)
    parser.add_argument(
        "-o", "--output", choices=["text", "json"], default="text", help="json: the normalized native job(s)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    jobs = load_files(args.files, args.overlay)
    problems = [
        SpecProblem(loaded.source, "", refused)
        for loaded in jobs
        if (refused := launch_refusal(loaded.job)) is not None
    ]
    if problems:
        raise SpecError(problems)
    if args.output == "json":
        print(as_json(jobs))
    else:
        for loaded in jobs:
            print(summary(loaded))
    return 0


def summary(loaded: LoadedJob) -> str:
    """``name (dialect): role replicas [min-max], ...``"""
    roles = ", ".join(
        f"{name} {spec.replicas} [{spec.min_count}-{spec.max_count}]"
        for name, spec in loaded.job.spec.replica_specs.items()
    )
    return f"{loaded.job.name} ({loaded.dialect}): {roles}"
