"""``trainguard scale JOB --role R --replicas N [--wait]``: change how many pods an elastic role has.

N must lie in the role's [minReplicas, maxReplicas]; otherwise nothing changes and the command says why.
With ``--wait`` it shows the role's pods until exactly N run and the removed ones have stopped (exit 1 if
that takes longer than ``--timeout`` seconds or the job ends first).
"""

from __future__ import annotations

import argparse
from typing import Any

from trainguard.cli.errors import CliError
from trainguard.cli.progress import Progress, wait_until
from trainguard.cli.verbs._local import call

#: Pod phases of a slot that is on its way up.
_STARTING = ("Waiting", "Pending", "Creating")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("scale", help="scale a role of a running job within [min, max]")
    parser.add_argument("job", metavar="JOB")
    parser.add_argument("--role", required=True, help="the role to scale (e.g. trainer, worker)")
    parser.add_argument("--replicas", required=True, type=_count, metavar="N", help="the new number of pods")
    parser.add_argument("--wait", action="store_true", help="show progress until the role has settled")
    parser.add_argument(
        "--timeout", type=float, default=300.0, metavar="SECONDS", help="give up waiting after this long"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = call("scale", job=args.job, role=args.role, replicas=args.replicas)
    job, role, replicas = result["name"], result["role"], result["replicas"]
    print(f"job {job}: role {role} scaling to {replicas}", flush=True)
    if not args.wait:
        return 0
    progress = Progress()
    done, last = wait_until(lambda: settled(call("get", job=job), role, replicas), progress, args.timeout)
    progress.close()
    if not done:
        raise CliError(f"{last} after {args.timeout:g} s; see 'trainguard describe {job}'", 1)
    print(f"job {job}: role {role} has {replicas} pod{'' if replicas == 1 else 's'} running")
    return 0


def settled(view: dict[str, Any], role: str, replicas: int) -> tuple[bool, str]:
    """Whether ``role`` has exactly ``replicas`` pods running and none coming or going; and the state in words."""
    status = view["status"]
    name = view["metadata"]["name"]
    if status["phase"] in ("Succeeded", "Failed", "Timeout"):
        raise CliError(f"job {name} ended ({status['phase']}) before role {role} settled", 1)
    pods = [pod for pod in status["pods"] if pod["role"] == role]
    running = sum(1 for pod in pods if pod["phase"] == "Running")
    starting = sum(1 for pod in pods if pod["phase"] in _STARTING)
    stopping = sum(1 for pod in pods if pod["phase"] == "Removed" and "pid" in pod)
    words = f"job {name}: role {role} {running}/{replicas} running"
    words += f", {starting} starting" if starting else ""
    words += f", {stopping} stopping" if stopping else ""
    done = (
        status.get("desired", {}).get(role) == replicas
        and running == replicas
        and not starting
        and not stopping
        and status["phase"] != "Scaling"
    )
    return done, words


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise CliError(f"--replicas {text!r}: give a whole number, 0 or more")
    return value
