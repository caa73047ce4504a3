"""What users see of a job: the JSON of ``get -o json`` and the text of ``get``, ``describe`` and ``run``.

``job_view`` is the one shape every view starts from: the job as a resource with ``metadata``, ``spec`` and a
``status`` holding phase, conditions, restart counts, replicas, pods and history (the fields docs/operator.md
lists under Status, scale and restart safety).

Restarts are relaunches. A hang restart in place (the hung command run again in its pod, nothing rescheduled)
is not among them: it is shown on its own, as hang restarts (``hangRestartCounts``, a pod's ``hangRestarts``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from trainguard.backends.local.records import JobRecord, PodRecord, PodState
from trainguard.ui.pages import slow_link, suspended_lines

#: Status fields kept for the controller's own bookkeeping; not part of what users read.
_INTERNAL = (
    "policyState",
    "issuedKeys",
    "handledScaleRequests",
    "specReplicas",
    "eventSeq",
    "revision",
    "scaleVersion",
    "discoveryVersion",
    "liveUnusedWarned",
)
_TERMINAL = ("Succeeded", "Failed", "Timeout")


def job_view(record: JobRecord, rows: Sequence[PodRecord]) -> dict[str, Any]:
    status = dict(record.status)
    slots = status.pop("pods", [])
    for key in _INTERNAL:
        status.pop(key, None)
    status.setdefault("phase", "Pending")
    status.setdefault("conditions", [])
    status.setdefault("restartCounts", {})
    status.setdefault("hangRestartCounts", {})
    status.setdefault("replicas", {})
    status.setdefault("history", [])
    by_name = {row.name: row for row in rows}
    status["pods"] = [_pod_view(slot, by_name.get(slot["name"])) for slot in slots]
    return {
        "apiVersion": record.spec.get("apiVersion", "trainguard.io/v1"),
        "kind": record.spec.get("kind", "TrainingJob"),
        "metadata": {
            **record.spec.get("metadata", {}),
            "uid": record.uid,
            "creationTimestamp": iso(record.created_at),
        },
        "spec": record.spec.get("spec", {}),
        "status": status,
    }


def _pod_view(slot: dict[str, Any], row: PodRecord | None) -> dict[str, Any]:
    view = {
        "name": slot["name"],
        "role": slot["role"],
        "index": slot["index"],
        "node": slot.get("node") or (row.node if row and row.node else None),
        "phase": slot["phase"],
        "restarts": slot.get("restarts", 0),
        "hangRestarts": slot.get("hangRestarts", 0),
        "generation": slot.get("generation", 1),
    }
    if slot.get("spares") is not None:  # a live pod's hot spares, warm and waiting
        view["spares"] = slot["spares"]
    if row is not None and row.launch == view["generation"]:
        if row.state in (PodState.RUNNING, PodState.TERMINATING):
            view["pid"] = row.pid
        if row.exit_code is not None:
            view["exitCode"] = row.exit_code
        if row.reason:
            view["reason"] = row.reason
    if slot.get("message"):
        view["message"] = slot["message"]
    return view


def is_finished(view: dict[str, Any]) -> bool:
    return view["status"]["phase"] in _TERMINAL


def iso(at: float | None) -> str | None:
    if at is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def age(at: float | None, now: float) -> str:
    if at is None:
        return "-"
    seconds = max(0, int(now - at))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


# ---- text ------------------------------------------------------------------------------------------


def table(rows: Iterable[Sequence[object]], header: Sequence[str]) -> str:
    cells = [list(map(str, header)), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def jobs_table(views: Sequence[dict[str, Any]], now: float, wide: bool = False) -> str:
    header = ["NAME", "PHASE", "REPLICAS", "RESTARTS", "HANG-RESTARTS", "AGE"]
    header += ["PODS", "MESSAGE"] if wide else []
    rows = []
    for view in views:
        status = view["status"]
        replicas = ",".join(f"{role}={n}" for role, n in status.get("replicas", {}).items()) or "-"
        restarts = sum(status.get("restartCounts", {}).values())
        hangs = sum(status.get("hangRestartCounts", {}).values())
        created = _epoch(view["metadata"].get("creationTimestamp"))
        row: list[object] = [view["metadata"]["name"], status["phase"], replicas, restarts, hangs]
        row.append(age(created, now))
        if wide:
            row += [len(status.get("pods", [])), status.get("message", "")]
        rows.append(row)
    return table(rows, header)


def pods_table(view: dict[str, Any], wide: bool = False) -> str:
    """The job's pods; a live job's with hot spares has SPARES, each pod's spares warm and waiting."""
    spares = any(pod.get("spares") is not None for pod in view["status"]["pods"])
    header = ["POD", "ROLE", "NODE", "PHASE", "RESTARTS", "HANG-RESTARTS", *(["SPARES"] if spares else [])]
    header += ["PID", "EXIT", "REASON"] if wide else []
    rows = []
    for pod in view["status"]["pods"]:
        row: list[object] = [pod["name"], pod["role"], pod.get("node") or "-", pod["phase"], pod["restarts"]]
        row.append(pod.get("hangRestarts", 0))
        if spares:
            row.append(pod.get("spares", "-") if pod.get("spares") is not None else "-")
        if wide:
            row += [pod.get("pid", "-"), pod.get("exitCode", "-"), pod.get("reason", "-")]
        rows.append(row)
    return table(rows, header)


def history_table(history: Sequence[dict[str, Any]]) -> str:
    rows = []
    for entry in history:
        recovery = entry.get("recoverySeconds")
        rows.append(
            [
                clock_time(entry.get("at")),
                entry.get("pod") or "-",
                entry.get("fault") or entry.get("kind", "-"),
                entry.get("rule") or "-",
                entry.get("action", "-") + (f"/{entry['scope']}" if entry.get("scope") else ""),
                "yes" if entry.get("counted") else "no",
                f"{recovery:.1f}s" if isinstance(recovery, int | float) else "-",
                entry.get("reason", ""),
            ]
        )
    return table(rows, ["TIME", "POD", "FAULT", "RULE", "ACTION", "COUNTED", "RECOVERY", "REASON"])


def events_table(events: Sequence[dict[str, Any]]) -> str:
    rows = [[clock_time(e["time"]), e["type"], e["reason"], e["object"], e["message"]] for e in events]
    return table(rows, ["TIME", "TYPE", "REASON", "OBJECT", "MESSAGE"])


def clock_time(at: float | None) -> str:
    return "-" if at is None else time.strftime("%H:%M:%S", time.localtime(at))


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    import calendar

    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


def summary_line(view: dict[str, Any], now: float) -> str:
    """``job NAME: Running (42s) - launcher 1/1, trainer 3/3 [1-5] - restarts launcher=0 trainer=1``, then
    `` - hang restarts launcher=0 trainer=2`` once a pod was restarted in place for a hang."""
    status = view["status"]
    spec_roles = view["spec"].get("replicaSpecs", {})
    roles = []
    for role, spec in spec_roles.items():
        running = sum(1 for p in status["pods"] if p["role"] == role and p["phase"] == "Running")
        want = status.get("desired", {}).get(role, spec.get("replicas", 1))
        low, high = spec.get("minReplicas"), spec.get("maxReplicas")
        bounds = f" [{low}-{high}]" if low is not None and high is not None and low != high else ""
        roles.append(f"{role} {running}/{want}{bounds}")
    restarts = " ".join(f"{role}={n}" for role, n in status.get("restartCounts", {}).items())
    hang_counts = status.get("hangRestartCounts", {})
    hangs = " ".join(f"{role}={n}" for role, n in hang_counts.items()) if any(hang_counts.values()) else ""
    created = _epoch(view["metadata"].get("creationTimestamp"))
    text = f"job {view['metadata']['name']}: {status['phase']} ({age(created, now)}) - {', '.join(roles)}"
    text += f" - restarts {restarts}" if restarts else ""
    return text + (f" - hang restarts {hangs}" if hangs else "")


def redrawn_block(view: dict[str, Any], events: Sequence[dict[str, Any]], now: float) -> str:
    """The block ``trainguard run`` redraws on a terminal: summary, pods by role and node, latest events."""
    parts = [summary_line(view, now), "", pods_table(view)]
    if events:
        parts += ["", "latest events:"]
        parts += [
            f"  {clock_time(e['time'])} {e['reason']:<20} {e['object']}: {e['message']}" for e in events
        ]
    message = view["status"].get("message")
    if is_finished(view) and message:
        parts += ["", f"{view['status']['phase']}: {message}"]
    return "\n".join(parts)


def describe(view: dict[str, Any], events: Sequence[dict[str, Any]], now: float) -> str:
    """``trainguard describe``: spec summary, conditions, restart and hang restart counts, pods, history,
    events."""
    meta, spec, status = view["metadata"], view["spec"], view["status"]
    lines = [
        f"Name:         {meta['name']}",
        f"Namespace:    {meta.get('namespace', 'default')}",
        f"UID:          {meta.get('uid')}",
        f"Created:      {meta.get('creationTimestamp')}",
        f"Framework:    {spec.get('frameworkType', 'generic')}",
        f"Policies:     completePolicy={spec.get('completePolicy', 'All')} failPolicy={spec.get('failPolicy', 'Any')}"
        f" cleanPodPolicy={spec.get('cleanPodPolicy', 'Running')}",
        f"Phase:        {status['phase']}" + (f" ({status['message']})" if status.get("message") else ""),
        *(f"Suspended:    {line}" for line in suspended_lines(status)),
        "Note:         local runtime: container images are ignored; each pod runs its container's command",
        "              on this machine (a process group under the trainguard agent).",
        "",
        "Roles:",
    ]
    for role, role_spec in spec.get("replicaSpecs", {}).items():
        low, high = role_spec.get("minReplicas"), role_spec.get("maxReplicas")
        rules = len(role_spec.get("faultTolerantPolicy", []))
        lines.append(
            f"  {role}: replicas {status.get('replicas', {}).get(role, role_spec.get('replicas', 1))}"
            f" (spec {role_spec.get('replicas', 1)}"
            + (f", min {low}, max {high}" if low is not None or high is not None else "")
            + f"), restartPolicy {role_spec.get('restartPolicy', 'OnFailure')}"
            f"/{role_spec.get('restartScope', 'Pod')}, restartLimit {role_spec.get('restartLimit', '-')},"
            f" {rules} faultTolerantPolicy rule(s), restarts {status.get('restartCounts', {}).get(role, 0)},"
            f" hang restarts {status.get('hangRestartCounts', {}).get(role, 0)}"
        )
    lines += ["", "Conditions:"]
    conditions = status.get("conditions", [])
    lines += [
        "  "
        + table(
            [
                [c["type"], c["status"], c["reason"], clock_time(c.get("lastTransitionTime")), c["message"]]
                for c in conditions
            ],
            ["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"],
        ).replace("\n", "\n  ")
        if conditions
        else "  (none yet)"
    ]
    lines += ["", "Pods:", "  " + pods_table(view, wide=True).replace("\n", "\n  ")]
    history = status.get("history", [])
    lines += ["", "Fault-recovery history:"]
    lines += ["  " + history_table(history).replace("\n", "\n  ") if history else "  (no faults)"]
    lines += ["", "Fault tolerance check:", *("  " + line for line in fault_check_lines(status))]
    lines += ["", "Events:"]
    lines += ["  " + events_table(events).replace("\n", "\n  ") if events else "  (none)"]
    return "\n".join(lines)


def fault_check_lines(status: dict[str, Any]) -> list[str]:
    """What the job's fault tolerance check found: each node's latest check, the nodes isolated because of it,
    the pods issued again, the bandwidth probe's slowest pod where one is well below the others
    (``JobStatus.fault_check``)."""
    checked = status.get("faultCheck")
    if not checked:
        return ["(no check reported: off, or no pod has checked its node yet)"]
    lines = [
        f"issued again: {checked.get('reissues', 0)} pod(s); isolated: "
        + (", ".join(checked.get("isolated") or ()) or "none")
    ]
    slowest = slow_link(checked)
    if slowest is not None:
        lines.append(slowest)
    rows = []
    for entry in checked.get("nodes") or ():
        failed = ", ".join(
            f"{item['name']}={item.get('value', '?')} (threshold {item.get('threshold', '?')})"
            for item in entry.get("failed") or ()
        )
        rows.append(
            [entry.get("node") or "-", entry.get("pod") or "-", entry["phase"], entry["verdict"],
             clock_time(entry.get("at")), failed or f"{entry.get('items', 0)} items passed"]
        )  # fmt: skip
    if rows:
        lines += table(rows, ["NODE", "POD", "CHECK", "VERDICT", "AT", "ITEMS"]).splitlines()
    return lines
