"""What the verbs that read job files share: the FILE and --overlay arguments, loading, warnings, output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from trainguard.api import SpecError, SpecProblem
from trainguard.api.documents import MAX_FILE_BYTES
from trainguard.api.load import LoadedJob, load_bytes, load_jobs, load_overlay

STDIN = "-"


def add_overlay_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--overlay",
        action="append",
        default=[],
        metavar="FILE",
        help='annotations to lay over every job, e.g. {"kind": "job", "metadata": {"annotations": '
        '{"fault-tolerance/job-retry-num": "3"}}} (may be given more than once)',
    )


def load_files(paths: Sequence[str], overlay_paths: Sequence[str]) -> list[LoadedJob]:
    """Every job of every file (``-`` is stdin), warnings printed to stderr; all problems in one SpecError."""
    problems: list[SpecProblem] = []
    overlays = []
    for path in overlay_paths:
        try:
            overlays.append(load_overlay(path))
        except SpecError as error:
            problems.extend(error.problems)
    if problems:
        raise SpecError(problems)
    jobs: list[LoadedJob] = []
    for path in paths:
        try:
            if path == STDIN:
                jobs.extend(load_bytes(sys.stdin.buffer.read(MAX_FILE_BYTES + 1), "<stdin>", overlays))
            else:
                jobs.extend(load_jobs(path, overlays))
        except SpecError as error:
            problems.extend(error.problems)
    for job in jobs:
        for warning in job.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    if problems:
        raise SpecError(problems)
    return jobs


def as_json(jobs: Sequence[LoadedJob]) -> str:
    """One job as an object; several as a Kubernetes List, as kubectl prints them."""
    return json.dumps(_one_or_list([loaded.job.to_dict() for loaded in jobs]), indent=2)


def as_yaml(jobs: Sequence[LoadedJob]) -> str:
    return yaml.safe_dump_all([loaded.job.to_dict() for loaded in jobs], sort_keys=False, width=110)


def _one_or_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    if len(items) == 1:
        return items[0]
    return {"apiVersion": "v1", "kind": "List", "items": items}
