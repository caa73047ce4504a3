"""``trainguard barrier --barrier_roles=ROLES --incluster --name=JOB --namespace=NS``: wait for a job's pods.

CCE's job barrier, with its flags, for the init container of a launcher: returns (exit 0) once every pod of
the named roles is Running and resolves by its DNS name; exit 1 when ``--timeout`` passes first, naming what
it waited for; exit 2 for a bad flag. See ``trainguard.backends.k8s.barrier``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from trainguard.cli.errors import CliError
from trainguard.pod import contract


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "barrier",
        help="wait until every pod of a job's roles runs and resolves (CCE's job barrier, for init containers)",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    parser.add_argument(
        "--barrier_roles", "--barrier-roles", dest="roles", required=True, metavar="ROLES",
        help="the roles to wait for, comma-separated, e.g. trainer",
    )  # fmt: skip
    parser.add_argument(
        "--name", default=os.environ.get(contract.ENV_JOB_NAME), help="the job (default: $TRAININGJOB_NAME)"
    )
    parser.add_argument(
        "--namespace",
        default=os.environ.get(contract.ENV_JOB_NAMESPACE),
        help="the job's namespace (default: $TRAININGJOB_NAMESPACE)",
    )
    parser.add_argument(
        "--incluster", action="store_true", help="use the pod's service account (the default)"
    )
    parser.add_argument(
        "--kubeconfig", metavar="FILE", help="a kubeconfig instead of the pod's service account"
    )
    parser.add_argument(
        "--dns_check_svc", "--dns-check-svc", dest="dns_service", default="kube-dns", metavar="SERVICE",
        help="the cluster's DNS Service the pods' names resolve through (kube-dns), named in messages",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=float, default=1800.0, metavar="SECONDS", help="give up after this long (1800)"
    )
    parser.add_argument("--interval", type=float, default=2.0, metavar="SECONDS", help="between looks (2)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    roles = tuple(role.strip() for role in args.roles.split(",") if role.strip())
    if not roles:
        raise CliError("--barrier_roles: name at least one role, e.g. --barrier_roles=trainer")
    for flag, value in (("--name", args.name), ("--namespace", args.namespace)):
        if not value or value.startswith("$("):
            raise CliError(
                f"{flag}: no job given (got {value!r}); pass {flag}=..., or run in a pod of the job, whose "
                f"{contract.ENV_JOB_NAME} and {contract.ENV_JOB_NAMESPACE} the operator sets"
            )
    if args.timeout <= 0 or args.interval <= 0:
        raise CliError("--timeout and --interval take a positive number of seconds, e.g. --timeout 600")
    try:
        from trainguard.backends.k8s import barrier
        from trainguard.backends.k8s.client import ApiError, Kube
        from trainguard.backends.k8s.metadata import LABEL_JOB
    except ImportError as error:
        raise CliError(
            f"the barrier needs the Kubernetes client ({error.name}): pip install 'trainguard[k8s]'"
        ) from None
    sizes_text = os.environ.get(contract.ENV_ROLE_SIZES, "")
    try:
        sizes = barrier.parse_sizes(sizes_text) if sizes_text else None
    except ValueError as error:
        raise CliError(str(error)) from None
    try:
        kube = Kube(args.kubeconfig)
    except Exception as error:
        raise CliError(f"cannot load the Kubernetes configuration: {error}") from None
    path = f"/api/v1/namespaces/{args.namespace}/pods"

    def list_pods() -> list[dict[str, Any]]:
        try:
            return list(kube.list(path, labelSelector=f"{LABEL_JOB}={args.name}").get("items") or [])
        except ApiError as error:
            say(f"cannot list the job's pods ({error}); trying again")
            return []

    def say(line: str) -> None:
        print(f"[trainguard barrier] {args.namespace}/{args.name}: {line}", file=sys.stderr, flush=True)

    try:
        missing = barrier.wait(
            list_pods, args.name, args.namespace, roles, sizes, args.timeout, say, interval=args.interval
        )
    finally:
        kube.close()
    if missing:
        say(f"gave up after {args.timeout:.0f} s (--timeout); names resolve through {args.dns_service}")
        return 1
    return 0
