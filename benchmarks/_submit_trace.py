"""What the cluster did while an operator's jobs went from submitted to all Running (``k8s_peers.py
--submit-trace``): when each pod was created, bound by the scheduler and made Running by kwok (as the
benchmark's own watch saw them), the CPU each process of the machine spent meanwhile (``/proc``), the API
server's writes and reads by verb and resource (its ``apiserver_request_total``), the events it sent to watchers
and their bytes by resource (``apiserver_watch_events_total``, ``..._sizes_sum``: every watcher of pods gets
every change of every pod), and the size of a pod as the API server keeps it (its managed fields apart: the
server computes them on every write of the pod).

Every operator is measured the same way in the same run; the trace goes into the raw JSON beside the entry's
figures (``submit_traces``), not among them.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
#: Processes whose CPU is kept (the rest of the machine's is summed as "other"): the cluster's and the operators',
#: by their command names as the kernel keeps them (``comm``: at most 15 characters).
PROCESSES = (
    "kube-apiserver",
    "etcd",
    "kwok-controller",
    "kube-scheduler",
    "kube-controller",
    "trainguard",
    "training-operat",
    "vc-controller-m",
    "vc-scheduler",
)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def process_cpu(proc: str = "/proc") -> dict[str, float]:
    """CPU seconds (user + system) of every process by its command name (``comm``), summed over processes."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for entry in Path(proc).iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        found[name] = found.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return found


_READS = ("GET", "LIST", "WATCH")


def _summed(metrics: str, name: str, key: Callable[[dict[str, str]], str | None]) -> dict[str, float]:
    """The samples of the counter ``name`` summed by ``key(labels)`` (None: left out)."""
    found: dict[str, float] = {}
    for line in metrics.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels = dict(_LABEL.findall(line))
        kept = key(labels)
        if kept is not None:
            found[kept] = found.get(kept, 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def _request(labels: dict[str, str]) -> str:
    sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
    return f"{labels.get('verb')} {labels.get('resource')}{sub}"


def api_writes(metrics: str) -> dict[str, float]:
    """The API server's requests that write (not GET, LIST, WATCH), by "VERB resource[/subresource]"."""
    return _summed(
        metrics,
        "apiserver_request_total",
        lambda labels: None if labels.get("verb") in _READS else _request(labels),
    )


def api_reads(metrics: str) -> dict[str, float]:
    """The API server's GETs and LISTs (a WATCH counts a connection, not what it sends: ``watch_events``)."""
    return _summed(
        metrics,
        "apiserver_request_total",
        lambda labels: _request(labels) if labels.get("verb") in ("GET", "LIST") else None,
    )


def watch_events(metrics: str) -> dict[str, float]:
    """The events the API server sent to watchers, by resource: each watcher of pods gets each pod's change."""
    return _summed(metrics, "apiserver_watch_events_total", lambda labels: labels.get("resource") or "?")


def watch_bytes(metrics: str) -> dict[str, float]:
    """The bytes of those events, by resource."""
    return _summed(metrics, "apiserver_watch_events_sizes_sum", lambda labels: labels.get("resource") or "?")


#: What a trace counts from the API server's metrics, each by its key, the change over the submit.
COUNTERS: dict[str, Callable[[str], dict[str, float]]] = {
    "api_writes": api_writes,
    "api_reads": api_reads,
    "watch_events": watch_events,
    "watch_bytes": watch_bytes,
}


def _spread(values: list[float]) -> Obj | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p90": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))], 2),
        "last": round(ordered[-1], 2),
    }


def _size(obj: Obj) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


class SubmitTrace:
    """Feed ``seen`` every pod the benchmark's watch brings; ``start`` at the submit, ``finish`` at all
    Running."""

    def __init__(self, metrics: Any) -> None:
        #: Returns the API server's metrics text.
        self.metrics = metrics
        self.started = 0.0
        self.pods: dict[str, dict[str, float]] = {}
        self.sizes: list[tuple[int, int]] = []
        self._cpu: dict[str, float] = {}
        self._counted: dict[str, dict[str, float]] = {}

    def start(self) -> None:
        self._cpu = process_cpu()
        text = self.metrics()
        self._counted = {name: count(text) for name, count in COUNTERS.items()}
        self.pods.clear()
        self.sizes.clear()
        self.started = time.monotonic()

    def seen(self, pod: Obj, old: Obj | None) -> None:
        if not self.started:
            return
        now = time.monotonic() - self.started
        times = self.pods.setdefault(pod["metadata"]["name"], {"created": now})
        if (pod.get("spec") or {}).get("nodeName"):
            times.setdefault("bound", now)
        if (pod.get("status") or {}).get("phase") == "Running" and "running" not in times:
            times["running"] = now
            managed = _size(pod["metadata"].get("managedFields") or [])
            self.sizes.append((_size(pod) - managed, managed))

    def finish(self) -> Obj:
        cpu_now, text = process_cpu(), self.metrics()
        cpu = {name: cpu_now[name] - self._cpu.get(name, 0.0) for name in cpu_now}
        kept = {name: round(cpu.get(name, 0.0), 2) for name in PROCESSES if cpu.get(name, 0.0) > 0}
        kept["other"] = round(sum(s for name, s in cpu.items() if name not in PROCESSES and s > 0), 2)
        counted = {}
        for name, count in COUNTERS.items():
            before = self._counted.get(name, {})
            grown = {key: round(n - before.get(key, 0.0)) for key, n in count(text).items()}
            counted[name] = {key: n for key, n in sorted(grown.items(), key=lambda kv: -kv[1]) if n > 0}
        writes = counted["api_writes"]
        times = list(self.pods.values())

        def lag(a: str, b: str) -> Obj | None:
            return _spread([t[b] - t[a] for t in times if a in t and b in t])

        return {
            "seconds": round(time.monotonic() - self.started, 2),
            "pods": len(times),
            "created_s": _spread([t["created"] for t in times]),
            "bound_s": _spread([t["bound"] for t in times if "bound" in t]),
            "running_s": _spread([t["running"] for t in times if "running" in t]),
            "created_to_bound_s": lag("created", "bound"),
            "bound_to_running_s": lag("bound", "running"),
            "cpu_s": kept,
            **counted,
            "api_writes_total": sum(writes.values()),
            "pod_bytes": round(statistics.median(s for s, _ in self.sizes)) if self.sizes else None,
            "pod_managed_fields_bytes": round(statistics.median(m for _, m in self.sizes))
            if self.sizes
            else None,
        }


# ---- docs/operator.md's table of the traces ----------------------------------------------------------------

BEGIN = "<!-- k8s_peers --trace-table "
#: The operator's own process, by its command name, per peer.
OPERATOR_PROCESS = {"trainguard": "trainguard", "kubeflow": "training-operat", "volcano": "vc-controller-m"}
HEADINGS = {
    "trainguard/as_shipped": "trainguard",
    "kubeflow/as_shipped": "Kubeflow as shipped",
    "kubeflow/equal": "Kubeflow equal",
    "volcano/as_shipped": "Volcano as shipped",
    "volcano/equal": "Volcano equal",
}


def _at(*keys: str) -> Any:
    def get(trace: Obj, entry: str) -> Any:
        value: Any = trace
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    return get


def _operator_cpu(trace: Obj, entry: str) -> Any:
    """The operator's own process's CPU; None where it was not kept (Volcano's, in traces taken before its
    command name was listed as the kernel cuts it, 15 characters)."""
    return (trace.get("cpu_s") or {}).get(OPERATOR_PROCESS[entry.split("/")[0]])


def _status_writes(trace: Obj, entry: str) -> Any:
    writes = trace.get("api_writes") or {}
    return sum(n for key, n in writes.items() if key.startswith("PUT ") and key.endswith("jobs/status"))


#: (label, the figure of a trace, unit): " s", " B" or "" (a count).
ROWS: tuple[tuple[str, Any, str], ...] = (
    ("submit -> all Running", _at("seconds"), " s"),
    ("pods created: median", _at("created_s", "p50"), " s"),
    ("pods created: last", _at("created_s", "last"), " s"),
    ("created -> bound by the scheduler: median", _at("created_to_bound_s", "p50"), " s"),
    ("bound -> Running (kwok): median", _at("bound_to_running_s", "p50"), " s"),
    ("CPU: kube-apiserver", _at("cpu_s", "kube-apiserver"), " s"),
    ("CPU: etcd", _at("cpu_s", "etcd"), " s"),
    ("CPU: kwok", _at("cpu_s", "kwok-controller"), " s"),
    ("CPU: kube-scheduler", _at("cpu_s", "kube-scheduler"), " s"),
    ("CPU: kube-controller-manager", _at("cpu_s", "kube-controller"), " s"),
    ("CPU: the operator", _operator_cpu, " s"),
    ("API writes", _at("api_writes_total"), ""),
    ("... pods created", _at("api_writes", "POST pods"), ""),
    ("... pods' status written (kwok, the scheduler)", _at("api_writes", "PATCH pods/status"), ""),
    ("... Events", _at("api_writes", "POST events"), ""),
    ("... Services", _at("api_writes", "POST services"), ""),
    ("... jobs' status written", _status_writes, ""),
    ("a Running pod as stored, managed fields apart", _at("pod_bytes"), " B"),
    ("... its managed fields", _at("pod_managed_fields_bytes"), " B"),
)


def _cell(values: list[Any], unit: str) -> str:
    numbers = sorted(v for v in values if isinstance(v, (int, float)))
    if not numbers:
        return "-"

    def shown(v: float) -> str:
        return f"{v:,.2f}" if unit == " s" else f"{v:,.0f}"

    text = shown(statistics.median(numbers)) + unit
    if numbers[0] != numbers[-1]:
        text += f" ({shown(numbers[0])}-{shown(numbers[-1])})"
    return text


def trace_table(kept: list[tuple[str, Obj]]) -> list[str]:
    """The lines docs/operator.md shows for the traces in these kept raw files (``(name, content)``): each row's
    median over the rounds (their range where they differ), one column per traced entry."""
    traces: dict[str, list[Obj]] = {}
    for _, content in kept:
        for run in content.get("runs_raw") or []:
            for entry, trace in (run.get("submit_traces") or {}).items():
                traces.setdefault(entry, []).append(trace)
    if not traces:
        raise ValueError(f"{', '.join(n for n, _ in kept)}: no submit_traces (run with --submit-trace)")
    columns = [entry for entry in HEADINGS if entry in traces]
    counts = sorted({len(traces[entry]) for entry in columns})
    lines = [
        f"From {', '.join(n for n, _ in kept)}: the submit traced in {'/'.join(map(str, counts))} round(s) per "
        "operator; medians (range).",
        "",
        "| traced at submit | " + " | ".join(HEADINGS[e] for e in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for label, figure, unit in ROWS:
        cells = [_cell([figure(t, entry) for t in traces[entry]], unit) for entry in columns]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines
