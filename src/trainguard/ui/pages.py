"""What the job pages show, from what every backend has: the job (``TrainingJob``) and its view (the resource
with its status, as ``trainguard get -o json`` prints it and the operator stores it), and its events.

Pure functions: the local control plane and the operator serve the same data, so the page is the same on both.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from trainguard.api.model import TrainingJob
from trainguard.observability import timeline
from trainguard.policy import FaultKind, PodRef, resolve_role, what_if
from trainguard.policy.whatif import decision_fields

#: The events a job page lists (the newest).
EVENTS_SHOWN = 50
#: The faults a what-if can ask about, as the page names them; exit codes come as numbers.
WHAT_IF_EVENTS: dict[str, FaultKind] = {
    "Hang": FaultKind.HANG,
    "NodeNotReady": FaultKind.NODE_NOT_READY,
    "PodForceDeleted": FaultKind.POD_FORCE_DELETED,
    "PodEvicted": FaultKind.POD_EVICTED,
    "OOMKilled": FaultKind.OOM_KILLED,
    "StartTimeout": FaultKind.START_TIMEOUT,
    "HardwareFault": FaultKind.HARDWARE_FAULT,
    "PreCheckFailed": FaultKind.PRE_CHECK_FAILED,
}


class PageError(ValueError):
    """A request the page cannot answer: ``status`` is the HTTP status, the message is for the user."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def roles(job: TrainingJob, status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per role: pods running / desired, and the [min, max] a scale must stay within."""
    running: dict[str, int] = {}
    for pod in status.get("pods", []):
        if pod.get("phase") == "Running":
            running[pod["role"]] = running.get(pod["role"], 0) + 1
    desired = status.get("desired") or {}
    return [
        {
            "name": name,
            "ready": running.get(name, 0),
            "desired": int(desired.get(name, spec.replicas)),
            "min": spec.min_count,
            "max": spec.max_count,
        }
        for name, spec in job.spec.replica_specs.items()
    ]


def job_row(
    job: TrainingJob, view: Mapping[str, Any], now: float | None = None, key: str | None = None
) -> dict[str, Any]:
    """A line of the jobs list; ``key`` names the job in the pages' addresses (default: its name)."""
    status = view.get("status") or {}
    return {
        "name": key or job.name,
        "job": job.name,
        "namespace": job.metadata.namespace,
        "kind": view.get("kind", "TrainingJob"),
        "phase": status.get("phase", "Pending"),
        "roles": roles(job, status),
        "restarts": sum(int(n) for n in (status.get("restartCounts") or {}).values()),
        # Hang restarts in place are not relaunches: counted on their own, as ``get`` and ``describe`` do.
        "hang_restarts": sum(int(n) for n in (status.get("hangRestartCounts") or {}).values()),
        "age_s": _age(view, now),
    }


def job_detail(
    job: TrainingJob,
    view: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    now: float | None = None,
    key: str | None = None,
) -> dict[str, Any]:
    """Everything a job's page shows."""
    now = time.time() if now is None else now
    status = view.get("status") or {}
    drawn = timeline.build(job.name, status, now=None if _ended(status) else now)
    return {
        **job_row(job, view, now, key),
        "conditions": list(status.get("conditions", [])),
        "pods": [{"hangRestarts": 0, **pod} for pod in status.get("pods", [])],
        "history": [{**entry, "label": history_label(entry)} for entry in status.get("history", [])],
        "timeline": drawn.to_dict(),
        "events": list(events)[-EVENTS_SHOWN:],
        "time": time_lost(status, drawn.start, drawn.end),
        "fault_check": fault_check(status),
        "suspended": suspended_lines(status),
    }


def fault_check(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """The job's fault tolerance check as its page shows it (None: no pod reported a check)."""
    checked = status.get("faultCheck")
    if not checked:
        return None
    return {
        "isolated": list(checked.get("isolated") or ()),
        "reissues": int(checked.get("reissues") or 0),
        "nodes": list(checked.get("nodes") or ()),
        "slow_link": slow_link(checked),
    }


def slow_link(checked: Mapping[str, Any]) -> str | None:
    """The bandwidth probe's slowest pod, in words (None: no probe found one well below its role's others)."""
    link = checked.get("slowLink")
    if not link:
        return None
    return (
        f"slowest link: {link.get('pod')} on {link.get('node') or '?'}, {float(link.get('mbps') or 0):.1f} MB/s "
        f"to the next pod of its role (the role's median {float(link.get('median') or 0):.1f} MB/s)"
    )


def history_label(entry: Mapping[str, Any]) -> str:
    """What the page's history table says an entry did (its action column): a fault's action, a release of a
    lost host's survivors, a live re-formation with its round, size and step, from the entry's fields."""
    kind, action = entry.get("kind"), str(entry.get("action") or "")
    if kind == "release":
        return "survivors released" if action == "release" else "survivors wait"
    if kind == "straggler":
        figures = entry.get("straggler") or {}
        ratio = figures.get("ratio")
        words = f"straggler: rank {figures.get('rank', '?')}" + (
            f", {ratio:.1f}x the others" if ratio else ""
        )
        return words + (" (replaced)" if action == "restart" else "")
    if kind == "isolate":
        node = entry.get("node") or "?"
        return f"node {node} isolated" if action == "isolate" else f"node {node} not isolated (bound)"
    check = entry.get("check") or {}
    if kind == "fault" and check.get("scenario") is not None:
        return f"{action} (fault tolerance check, scenario {check['scenario']})"
    if kind == "reformed":
        formed = entry.get("reformation") or {}
        words = f"re-formed live: round {formed.get('round', '?')}"
        if formed.get("worldSize") is not None:
            words += f", {formed['worldSize']} worker{'s' if formed['worldSize'] != 1 else ''}"
        if formed.get("step") is not None:
            words += f" at step {formed['step']}"
        pods = list(formed.get("afterPods") or [])
        named = ", ".join(pods)
        words += {
            "fault": f", after {named or 'a member'} failed",
            "scale-in": f", after the scale-in that removed {named}",
            "scale-out": f", after the scale-out that added {named}",
            "joined": ", as newcomers joined",
        }.get(formed.get("after") or "", "")
        origin = formed.get("origin")
        if origin == "peer":
            grew = formed.get("after") in ("scale-out", "joined")
            words += " (newcomers got the state from a peer)" if grew else " (the state from a peer)"
        elif origin not in (None, "live"):
            words += f" (the state from {origin})"
        return words
    return action


def time_lost(status: Mapping[str, Any], start: float, end: float) -> dict[str, Any]:
    """Seconds from the first start to now (or the end), the seconds faults took to recover from, by fault,
    and goodput: the share of the time not spent recovering."""
    lost: dict[str, float] = {}
    for entry in status.get("history", []):
        if entry.get("kind") == "fault" and entry.get("recoverySeconds") is not None:
            cause = str(entry.get("fault") or "Unknown")
            lost[cause] = lost.get(cause, 0.0) + float(entry["recoverySeconds"])
    elapsed = max(end - start, 0.0)
    total = sum(lost.values())
    return {
        "elapsed_s": round(elapsed, 1),
        "lost_s": round(total, 1),
        "lost_by_cause": {cause: round(seconds, 1) for cause, seconds in sorted(lost.items())},
        "goodput": round(1 - min(total, elapsed) / elapsed, 4) if elapsed > 0 else None,
    }


def what_if_answer(job: TrainingJob, view: Mapping[str, Any], pod: str, fault: str) -> dict[str, Any]:
    """What the policy does if ``pod`` of the job had ``fault`` now (an exit code, or one of
    ``WHAT_IF_EVENTS``), with the restarts its role has spent so far: ``trainguard explain``'s engine."""
    status = view.get("status") or {}
    found = [p for p in status.get("pods", []) if p.get("name") == pod]
    if not found:
        names = ", ".join(p["name"] for p in status.get("pods", [])) or "none"
        raise PageError(f"job {job.name} has no pod {pod!r} (pods: {names})", 404)
    role, _ = resolve_role(job, found[0]["role"])
    text = fault.strip()
    code: int | None = None
    if text.isdigit():
        kind, code = FaultKind.EXITED, int(text)
        if code > 255:
            raise PageError(f"exit code {code}: exit codes are 0-255")
    elif text in WHAT_IF_EVENTS:
        kind = WHAT_IF_EVENTS[text]
    else:
        raise PageError(f"fault {text!r}: an exit code (0-255) or one of {', '.join(WHAT_IF_EVENTS)}")
    spent = int((status.get("restartCounts") or {}).get(role, 0))
    decision = what_if(job, PodRef(role, int(found[0]["index"])), kind, code, restarts=spent)
    return {"pod": pod, "fault": text, "restarts_spent": spent, **decision_fields(job, decision)}


def _age(view: Mapping[str, Any], now: float | None) -> float | None:
    stamp = (view.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return None
    try:
        created = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return round((time.time() if now is None else now) - created, 1)


def _ended(status: Mapping[str, Any]) -> bool:
    return status.get("phase") in ("Succeeded", "Failed", "Timeout")


def suspended_lines(status: Mapping[str, Any]) -> list[str]:
    """A job status's suspected hangs (detection only, ``trainguard.controller.suspicion``) in words, one line
    a pod: what ``describe`` and the job's page say; [] when none is suspected."""
    return [
        f"the job may be suspended: pod {pod.get('name')} made no progress ({seen.get('signal')}) for "
        f"{seen.get('idleSeconds', 0):.0f} s (detection only: restart upon suspension is off)"
        for pod in status.get("pods") or []
        if isinstance(seen := pod.get("suspectedHang"), dict)
    ]
