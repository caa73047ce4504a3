"""``trainguard explain``: what the policy decides for one fault of one pod, and why.

A thin view over ``trainguard.policy.what_if``: every other pod is healthy, ``--restarts K`` counted
restarts of the role are already spent (inside its window), and nothing else has happened yet.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from trainguard.api.model import TrainingJob
from trainguard.cli.errors import CliError
from trainguard.cli.verbs._jobfiles import add_overlay_argument, load_files
from trainguard.policy import Decision, FaultKind, PodRef, resolve_role, what_if
from trainguard.policy.whatif import decision_fields, rule_text

#: --event names (matched case-insensitively) and the fault each one is.
EVENTS: dict[str, FaultKind] = {
    "nodeNotReady": FaultKind.NODE_NOT_READY,
    "PodForceDeleted": FaultKind.POD_FORCE_DELETED,
    "PodEvicted": FaultKind.POD_EVICTED,
    "preempted": FaultKind.POD_EVICTED,
    "DisruptionTarget": FaultKind.POD_EVICTED,
    "OOMKilled": FaultKind.OOM_KILLED,
    "StartTimeout": FaultKind.START_TIMEOUT,
    "HardwareFault": FaultKind.HARDWARE_FAULT,
    "PreCheckFailed": FaultKind.PRE_CHECK_FAILED,
}
_MAX_EXIT_CODE = 255


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="show what the policy does about a fault of a pod, and which rule decides it",
        description="Show what trainguard's policy decides for one fault of one pod, with every other pod "
        "healthy and K counted restarts of the role already spent.",
    )
    parser.add_argument(
        "file", metavar="FILE", help="a job file (YAML or JSON, any supported dialect); - reads stdin"
    )
    parser.add_argument("--role", required=True, help="the role of the pod (case-insensitive)")
    parser.add_argument("--index", type=_non_negative, default=0, help="the pod's index in its role (0)")
    fault = parser.add_mutually_exclusive_group(required=True)
    fault.add_argument("--exit-code", type=_exit_code, metavar="N", help="the pod exited with code N")
    fault.add_argument(
        "--event",
        type=_event,
        metavar="EVENT",
        help="an exceptional event: nodeNotReady, PodForceDeleted, PodEvicted, OOMKilled or StartTimeout",
    )
    fault.add_argument("--hang", action="store_true", help="the pod stopped making progress")
    parser.add_argument(
        "--restarts",
        type=_non_negative,
        default=0,
        metavar="K",
        help="counted restarts of the role spent (0)",
    )
    parser.add_argument(
        "--hangs", type=_non_negative, default=0, metavar="N", help="hang restarts in place just before (0)"
    )
    add_overlay_argument(parser)
    parser.add_argument("--job", help="the job's name, when FILE holds several")
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text", help="output format")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    job = _pick_job(args.file, args.overlay, args.job)
    try:
        role, spec = resolve_role(job, args.role)
    except ValueError as error:
        raise CliError(f"{args.file}: {error}") from None
    if args.index >= spec.max_count:
        raise CliError(
            f"{args.file}: role {role} has pods {role}-0 to {role}-{spec.max_count - 1} "
            f"(maxReplicas {spec.max_count}); --index {args.index} is not one of them"
        )
    if args.hang:
        kind, code = FaultKind.HANG, None
    elif args.event is not None:
        kind, code = args.event, None
    else:
        kind, code = FaultKind.EXITED, args.exit_code
    decision = what_if(job, PodRef(role, args.index), kind, code, args.restarts, args.hangs)
    print(_as_json(job, decision) if args.output == "json" else _as_text(job, decision, args.restarts))
    return 0


def _pick_job(file: str, overlays: list[str], name: str | None) -> TrainingJob:
    jobs = [loaded.job for loaded in load_files([file], overlays)]
    if name is not None:
        chosen = [job for job in jobs if job.name == name]
        if not chosen:
            raise CliError(f"{file}: no job named {name!r}; it holds {', '.join(j.name for j in jobs)}")
        return chosen[0]
    if len(jobs) > 1:
        names = ", ".join(job.name for job in jobs)
        raise CliError(f"{file} holds {len(jobs)} jobs ({names}); choose one with --job NAME")
    return jobs[0]


def _as_json(job: TrainingJob, decision: Decision) -> str:
    fields = decision_fields(job, decision)
    return json.dumps({key: fields[key] for key in ("action", "scope", "rule", "counted", "reason")})


def _as_text(job: TrainingJob, decision: Decision, restarts: int) -> str:
    pod = decision.fault.pod
    spent = f", {restarts} counted restarts of role {pod.role} spent" if pod is not None else ""
    lines = [
        f"job {job.name}, pod {pod}{spent}:",
        f"  action:   {decision.action.value}",
        f"  scope:    {decision.scope.value if decision.scope is not None else '-'}",
        f"  rule:     {rule_text(job, decision)}",
        f"  counted:  {'yes' if decision.counted else 'no'}",
    ]
    if decision.delay_seconds > 0:
        lines.append(f"  backoff:  {decision.delay_seconds:g} s")
    if decision.replace_node:
        lines.append("  node:     on another node")
    if decision.limit is not None:
        lines.append(f"  limit:    {decision.limit}")
    lines.append(f"  reason:   {decision.reason}")
    return "\n".join(lines)


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _exit_code(text: str) -> int:
    value = _non_negative(text)
    if value > _MAX_EXIT_CODE:
        raise argparse.ArgumentTypeError(f"{value}: exit codes are 0-{_MAX_EXIT_CODE}")
    return value


def _event(text: str) -> FaultKind:
    for name, kind in EVENTS.items():
        if text.strip().lower() == name.lower():
            return kind
    if text.strip().lower() == "hang":
        return FaultKind.HANG
    raise argparse.ArgumentTypeError(f"{text!r} is not an event; use one of {', '.join(EVENTS)}")
