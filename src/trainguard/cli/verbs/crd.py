"""``trainguard crd [--dialect native|aitrainingjob|pytorchjob]``: print the CustomResourceDefinition."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from trainguard.api.crd import aitrainingjob_crd, native_crd, pytorchjob_crd


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "crd",
        help="print the CustomResourceDefinition generated from the job model",
        description="Print the CRD for trainingjobs.trainguard.io (native), "
        "aitrainingjobs.kongming.cce.baiudbce.com (aitrainingjob) or pytorchjobs.kubeflow.org as trainguard "
        "serves it (pytorchjob), ready for kubectl apply -f -.",
    )
    parser.add_argument("--dialect", choices=sorted(CRDS), default="native")
    parser.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    parser.set_defaults(func=run)


CRDS = {"native": native_crd, "aitrainingjob": aitrainingjob_crd, "pytorchjob": pytorchjob_crd}


def run(args: argparse.Namespace) -> int:
    crd = CRDS[args.dialect]()
    if args.output == "json":
        print(json.dumps(crd, indent=2))
    else:
        print(yaml.safe_dump(crd, sort_keys=False, width=110), end="")
    return 0
