"""What the verbs that talk to the local control plane share: the client, loading job files, output."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import ValidationError

from trainguard.api.load import LoadedJob, load_jobs
from trainguard.backends.local.client import Client, ClientError
from trainguard.cli.errors import CliError

OUTPUTS = ("json", "yaml", "wide")


def call(op: str, **args: Any) -> Any:
    """One request to the control plane (started when it is not running); its refusal is a CliError."""
    with Client() as client:
        try:
            return client.call(op, **args)
        except ClientError as error:
            raise CliError(str(error), error.exit_code) from None


def load(path: str, overlays: Sequence[str] = ()) -> list[LoadedJob]:
    """Every job in ``path``; a file that cannot be read is one clear error (SpecError for bad content)."""
    try:
        jobs = load_jobs(path, list(overlays))
    except (FileNotFoundError, IsADirectoryError, PermissionError) as error:
        raise CliError(f"{error.filename or path}: {error.strerror}") from None
    except yaml.YAMLError as error:  # the loader normally turns these into SpecErrors; never a traceback
        raise CliError(f"{path}: not valid YAML: {error}".splitlines()[0]) from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise CliError(f"{path}: {where}: {first['msg']}") from None
    for loaded in jobs:
        for warning in loaded.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return jobs


def add_overlay(parser: Any) -> None:
    parser.add_argument(
        "--overlay",
        action="append",
        default=[],
        metavar="FILE",
        help="apply annotations from FILE (e.g. ModelArts fault-tolerance settings); may be repeated",
    )


def dump(data: Any, output: str) -> str:
    if output == "yaml":
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip("\n")
    return json.dumps(data, indent=2)
