"""``trainguard convert FILE [--overlay F] -o yaml|json``: print the job in trainguard's native form."""

from __future__ import annotations

import argparse
from typing import Any

from trainguard.cli.verbs._jobfiles import add_overlay_argument, as_json, as_yaml, load_files


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "convert",
        help="print a job (any dialect) as a native TrainingJob",
        description="Convert an AITrainingJob, a Kubeflow PyTorchJob or a TrainingJob (with any ModelArts "
        "annotations applied) into trainguard's native TrainingJob, with every default written out.",
    )
    parser.add_argument("file", metavar="FILE", help="YAML or JSON job file; - reads stdin")
    add_overlay_argument(parser)
    parser.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    jobs = load_files([args.file], args.overlay)
    print(
        as_json(jobs) if args.output == "json" else as_yaml(jobs), end="" if args.output == "yaml" else "\n"
    )
    return 0
