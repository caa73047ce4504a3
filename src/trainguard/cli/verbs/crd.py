"""``trainguard crd [--dialect native|aitrainingjob]``: print the CustomResourceDefinition."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from trainguard.api.crd import aitrainingjob_crd, native_crd


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "crd",
        help="print the CustomResourceDefinition generated from the job model",
        description="Print the CRD for trainingjobs.trainguard.io (native) or "
        "aitrainingjobs.kongming.cce.baiudbce.com (aitrainingjob), ready for kubectl apply -f -.",
    )
    parser.add_argument("--dialect", choices=["native", "aitrainingjob"], default="native")
    parser.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    crd = native_crd() if args.dialect == "native" else aitrainingjob_crd()
    if args.output == "json":
        print(json.dumps(crd, indent=2))
    else:
        print(yaml.safe_dump(crd, sort_keys=False, width=110), end="")
    return 0
