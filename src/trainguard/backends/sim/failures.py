"""Where faults come from: rates per kind (exponential inter-arrival times, one MTBF per node) or a trace.

Every GPU node fails on its own with exponential times between failures of mean ``mtbf_hours``; a failure is
of one kind, drawn from the mix. Drawn as one Poisson process over all nodes (rate nodes / MTBF) that picks a
node at random, which is the same thing; a failure that picks a node already down is dropped (a node that is
down cannot fail again). A failure of a node without a pod of the job costs the job nothing, except that a
lost node is capacity the job cannot use until it is repaired.

A trace is a CSV file of ``time,node,kind`` rows (time in seconds from the start; node an index or a name
such as ``node-17``; kind one of the kinds below, or a synonym), with an optional header row.
"""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path


class FailureKind(str, Enum):
    #: The machine is lost (GPU, memory, NIC, power...): its pod is gone and the node needs a repair.
    NODE = "node"
    #: The training process dies; the node is fine.
    CRASH = "crash"
    #: The training process stops making progress (a stuck collective, a deadlock).
    HANG = "hang"
    #: The pod is evicted (host maintenance, preemption): a graceful stop; the node is drained for a while.
    EVICT = "evict"


_SYNONYMS = {
    "node": FailureKind.NODE,
    "node_loss": FailureKind.NODE,
    "nodeloss": FailureKind.NODE,
    "nodenotready": FailureKind.NODE,
    "crash": FailureKind.CRASH,
    "process_crash": FailureKind.CRASH,
    "exit": FailureKind.CRASH,
    "hang": FailureKind.HANG,
    "evict": FailureKind.EVICT,
    "eviction": FailureKind.EVICT,
    "podevicted": FailureKind.EVICT,
    "preempted": FailureKind.EVICT,
}

#: Roughly the causes of Llama 3's 419 unexpected interruptions: most were hardware that takes the node out
#: (GPU, HBM, NIC, host), then software crashes, then hangs (NCCL watchdog, network), then host maintenance.
DEFAULT_MIX: Mapping[FailureKind, float] = {
    FailureKind.NODE: 0.70,
    FailureKind.CRASH: 0.15,
    FailureKind.HANG: 0.08,
    FailureKind.EVICT: 0.07,
}


@dataclass(frozen=True)
class Failure:
    at: float
    #: Index of the GPU node.
    node: int
    kind: FailureKind


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file, the line and the fix."""


def parse_kind(text: str) -> FailureKind | None:
    return _SYNONYMS.get(text.strip().lower().replace("-", "_"))


def parse_mix(text: str) -> dict[FailureKind, float]:
    """``"node=0.7,crash=0.15,hang=0.08,evict=0.07"`` -> fractions (normalized to sum to 1)."""
    mix: dict[FailureKind, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        kind = parse_kind(name)
        if not sep or kind is None:
            raise ValueError(f"{part.strip()!r}: write KIND=FRACTION with KIND one of {_kind_names()}")
        try:
            share = float(value)
        except ValueError:
            raise ValueError(f"{part.strip()!r}: {value.strip()!r} is not a number") from None
        if share < 0:
            raise ValueError(f"{part.strip()!r}: a fraction cannot be negative")
        mix[kind] = mix.get(kind, 0.0) + share
    total = sum(mix.values())
    if total <= 0:
        raise ValueError("the failure mix needs at least one kind with a fraction above 0")
    return {kind: share / total for kind, share in mix.items()}


def drawn(
    rng: random.Random, nodes: int, mtbf_seconds: float, mix: Mapping[FailureKind, float], until: float
) -> Iterator[Failure]:
    """Failures of ``nodes`` nodes, each with exponential times between failures of mean ``mtbf_seconds``."""
    if nodes <= 0 or mtbf_seconds <= 0 or mtbf_seconds == float("inf"):
        return
    rate = nodes / mtbf_seconds
    kinds = [kind for kind, share in mix.items() if share > 0]
    weights = [mix[kind] for kind in kinds]
    at = rng.expovariate(rate)
    while at < until:
        yield Failure(at, rng.randrange(nodes), rng.choices(kinds, weights)[0])
        at += rng.expovariate(rate)


def read_trace(path: str | Path, nodes: int) -> list[Failure]:
    """The failures of a CSV trace, in time order; a TraceError names the line and field that is wrong."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise TraceError(f"{where}: cannot read the trace: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{where}: not a text file; a trace is CSV rows of time,node,kind") from None
    failures: list[Failure] = []
    for line, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        cells = [cell.strip() for cell in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        if line == 1 and cells[0].lower() == "time":
            continue
        if len(cells) != 3:
            raise TraceError(f"{where}:{line}: expected 3 fields time,node,kind, found {len(cells)}")
        failures.append(_row(where, line, cells, nodes))
    return sorted(failures, key=lambda failure: failure.at)


def _row(where: str, line: int, cells: list[str], nodes: int) -> Failure:
    time_text, node_text, kind_text = cells
    try:
        at = float(time_text)
    except ValueError:
        raise TraceError(f"{where}:{line}: time {time_text!r} is not a number of seconds") from None
    if not at >= 0 or at == float("inf"):
        raise TraceError(f"{where}:{line}: time {time_text!r} must be a finite number of seconds >= 0")
    node = _node_index(node_text)
    if node is None or not 0 <= node < nodes:
        raise TraceError(
            f"{where}:{line}: node {node_text!r} is not one of the {nodes} GPU nodes "
            f"(give an index 0-{nodes - 1} or a name such as node-{nodes - 1})"
        )
    kind = parse_kind(kind_text)
    if kind is None:
        raise TraceError(f"{where}:{line}: kind {kind_text!r} is not one of {_kind_names()}")
    return Failure(at, node, kind)


def _node_index(text: str) -> int | None:
    digits = text.rsplit("-", 1)[-1] if text.lower().startswith("node-") else text
    return int(digits) if digits.isdigit() else None


def _kind_names() -> str:
    return ", ".join(kind.value for kind in FailureKind)
