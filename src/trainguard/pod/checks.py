"""The fault tolerance check's words, shared by the agent that runs the checks in a pod and the control plane
that decides from them: the items and their thresholds, the settings the control plane hands the agent
(``contract.ENV_FAULT_CHECK``), and the record of one check that crosses the wall in the agent's report.

A check is run by the agent before the training command starts (``pre``), every ``period`` seconds while it
runs (``periodic``), and once after the command failed (``post``: was it the hardware, or the user's code?).
Each item gives the value it saw, its threshold and a verdict: ``ok``, ``hardware`` (the node's hardware is
faulty: isolate it), ``environment`` (the node works, but this pod cannot run here: a full disk, an
unreachable rendezvous), or ``skipped`` (nothing to check: no GPU, say).

Standard library only, Python 3.8: it runs in users' images from the bundle.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

OK = "ok"
HARDWARE = "hardware"
ENVIRONMENT = "environment"
SKIPPED = "skipped"
VERDICTS = (OK, HARDWARE, ENVIRONMENT, SKIPPED)

PRE = "pre"
PERIODIC = "periodic"
POST = "post"
PHASES = (PRE, PERIODIC, POST)

#: A failed check's reason, as the agent's final report (and the pod's termination log) gives it: what the
#: controller classifies as a ``HardwareFault`` (isolate the node, issue the pod again elsewhere) or a
#: ``PreCheckFailed`` (the node works, the pod cannot run there: issue it again elsewhere).
REASON_HARDWARE = "HardwareFault"
REASON_PRE_CHECK = "PreCheckFailed"
#: The agent's exit status after a failed check ended the pod (its training command never ran, or was stopped).
EXIT_CHECK_FAILED = 120


@dataclass(frozen=True)
class ItemSpec:
    """One check item: what it measures, in which unit, the verdict a value past its threshold gets, the
    default threshold and the range a job may set it in. ``above``: a value above the threshold fails (a count
    of errors), else below it (a throughput, free space)."""

    name: str
    unit: str
    verdict: str
    default: float
    low: float
    high: float
    above: bool
    why: str

    def fails(self, value: float, threshold: float) -> bool:
        return value > threshold if self.above else value < threshold


#: The items, with where each default comes from.
ITEMS: dict[str, ItemSpec] = {
    spec.name: spec
    for spec in (
        ItemSpec("gpu.count", "devices", HARDWARE, 0, 0, 1024, False,
                 "the devices NVML sees against those the pod asked for (0: as many as requested)"),
        ItemSpec("gpu.ecc", "errors", HARDWARE, 0, 0, 1e6, True,
                 "volatile uncorrectable ECC errors: any one means a bad page or a bad device (NVIDIA's "
                 "GPU memory error management guide)"),
        ItemSpec("gpu.retired", "pages", HARDWARE, 0, 0, 1e6, True,
                 "pages pending retirement, or row-remap failures (A100 and later): the device needs a reset "
                 "or a replacement (NVIDIA's dynamic page retirement and row remapping docs)"),
        ItemSpec("gpu.lost", "devices", HARDWARE, 0, 0, 1024, True,
                 "devices fallen off the bus (NVML_ERROR_GPU_IS_LOST; XID 79)"),
        ItemSpec("gpu.throttle", "devices", HARDWARE, 0, 0, 1024, True,
                 "devices whose clocks are held down for a hardware reason (hardware slowdown, power brake)"),
        ItemSpec("gpu.compute", "share", HARDWARE, 0.5, 0.0, 1.0, False,
                 "a matmul's throughput over what the card's model should give: half of it is well below "
                 "the 10-20 % spread between healthy cards of one model"),
        ItemSpec("host.disk", "share", ENVIRONMENT, 1.0, 0.0, 100.0, False,
                 "free space of the job's directories over what the job says it needs (1: all of it)"),
        ItemSpec("host.write", "seconds", ENVIRONMENT, 5.0, 0.01, 600.0, True,
                 "writing and syncing 1 MiB in each of the job's directories (a local disk takes "
                 "milliseconds; a hung mount never answers)"),
        ItemSpec("host.cpu", "share", HARDWARE, 0.2, 0.0, 1.0, False,
                 "a float loop's speed over this machine's own first measurement: a core held at a fifth "
                 "is throttled or broken"),
        ItemSpec("net.rendezvous", "seconds", ENVIRONMENT, 10.0, 0.1, 600.0, True,
                 "a TCP connection to the job's rendezvous (on one network it takes milliseconds)"),
        ItemSpec("net.bandwidth", "MB/s", ENVIRONMENT, 25.0, 0.0, 1e6, False,
                 "what this pod sends to the next pod of its role in a ring, the step of a ring all-reduce "
                 "(pre-check only): a quarter of what 1 Gb Ethernet carries, so a link fallen back to "
                 "100 Mb/s or a broken route, where training fabrics carry 40 times more and more"),
    )
}  # fmt: skip


#: The items only the pre-check runs (they need the job's other pods, which the periodic check leaves alone).
PRE_ONLY = frozenset({"net.bandwidth"})
#: The port of the bandwidth probe's listener in each pod (its own network namespace) on Kubernetes.
RING_PORT = 29431
#: What each pod sends its successor in the bandwidth probe.
RING_BYTES = 32 << 20


@dataclass(frozen=True)
class Ring:
    """The bandwidth probe's ring over one role's pods: pod ``index`` listens on ``port(index)`` and sends
    ``size`` bytes to pod ``index + 1`` (the last to the first), at ``host(index + 1)``. ``host`` has ``{index}``
    where each pod's index goes (``job-worker-{index}.job`` behind the job's headless Service); ``step``: ports
    that differ per pod (pods sharing one address), else 0."""

    host: str
    port: int = RING_PORT
    pods: int = 1
    step: int = 0
    size: int = RING_BYTES

    def next_of(self, index: int) -> int:
        return (index + 1) % max(self.pods, 1)

    def port_of(self, index: int) -> int:
        return self.port + self.step * index

    def address_of(self, index: int) -> tuple[str, int]:
        return self.host.replace("{index}", str(index)), self.port_of(index)

    def as_dict(self) -> dict[str, Any]:
        """The ring as JSON, without the fields at their defaults (``from_dict`` reads them back)."""
        whole = {
            "host": self.host,
            "port": self.port,
            "pods": self.pods,
            "step": self.step,
            "size": self.size,
        }
        default = Ring(self.host)
        return {key: value for key, value in whole.items() if key == "host" or value != getattr(default, key)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Ring:
        return cls(
            host=str(raw["host"]),
            port=int(raw.get("port", RING_PORT)),
            pods=int(raw.get("pods", 1)),
            step=int(raw.get("step", 0)),
            size=int(raw.get("size", RING_BYTES)),
        )


@dataclass(frozen=True)
class Settings:
    """What the control plane tells the agent about its checks (``contract.ENV_FAULT_CHECK``, as JSON)."""

    #: Seconds between periodic checks; 0: no periodic check.
    period: float = 300.0
    #: At most this long for one check, all items: past it the check is recorded ``environment``.
    timeout: float = 60.0
    #: Item name -> threshold, for the items set by the job (the others keep ``ItemSpec.default``).
    thresholds: Mapping[str, float] = field(default_factory=dict)
    #: Items not run.
    disabled: tuple[str, ...] = ()
    #: Directory -> bytes the job needs free there.
    disk: Mapping[str, int] = field(default_factory=dict)
    #: The GPUs the pod asked for (0: none).
    gpus: int = 0
    #: ``host:port`` of the job's rendezvous, where it has one.
    rendezvous: str | None = None
    #: Measure each rank's own work per step, for finding stragglers (``trainguard.agent.rankwork``).
    stragglers: bool = False
    #: The bandwidth probe's ring over the pod's role, where the backend gives each pod an address of its own.
    ring: Ring | None = None

    def threshold(self, item: str) -> float:
        return float(self.thresholds.get(item, ITEMS[item].default))

    def to_json(self) -> str:
        """The settings as compact JSON, without the fields at their defaults (every pod's agent gets them on its
        command line: the pod stays small); ``from_json`` reads them back whole."""
        default = Settings()._as_dict()
        kept = {key: value for key, value in self._as_dict().items() if value != default[key]}
        return json.dumps(kept, sort_keys=True, separators=(",", ":"))

    def _as_dict(self) -> dict[str, Any]:
        return {
            "period": self.period,
            "timeout": self.timeout,
            "thresholds": dict(self.thresholds),
            "disabled": list(self.disabled),
            "disk": dict(self.disk),
            "gpus": self.gpus,
            "rendezvous": self.rendezvous,
            "stragglers": self.stragglers,
            "ring": self.ring.as_dict() if self.ring is not None else None,
        }

    @classmethod
    def from_json(cls, text: str) -> Settings:
        """The settings in ``text``; ValueError naming what is wrong."""
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("the fault check's settings are not a JSON object")
        thresholds = {str(k): float(v) for k, v in dict(raw.get("thresholds") or {}).items()}
        unknown = sorted((set(thresholds) | set(raw.get("disabled") or ())) - set(ITEMS))
        if unknown:
            raise ValueError(f"unknown check items {unknown}; known: {sorted(ITEMS)}")
        return cls(
            period=float(raw.get("period", 300.0)),
            timeout=float(raw.get("timeout", 60.0)),
            thresholds=thresholds,
            disabled=tuple(str(item) for item in raw.get("disabled") or ()),
            disk={str(k): int(v) for k, v in dict(raw.get("disk") or {}).items()},
            gpus=int(raw.get("gpus") or 0),
            rendezvous=str(raw["rendezvous"]) if raw.get("rendezvous") else None,
            stragglers=bool(raw.get("stragglers", False)),
            ring=Ring.from_dict(raw["ring"]) if isinstance(raw.get("ring"), dict) else None,
        )


@dataclass(frozen=True)
class CheckItem:
    """One item's reading: the value seen (None where none could be read), its threshold, the verdict."""

    name: str
    verdict: str
    value: float | None = None
    threshold: float | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "verdict": self.verdict}
        if self.value is not None:
            out["value"] = self.value
        if self.threshold is not None:
            out["threshold"] = self.threshold
        if self.detail:
            out["detail"] = self.detail[:DETAIL_LIMIT]
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CheckItem:
        verdict = str(raw.get("verdict"))
        if verdict not in VERDICTS:
            raise ValueError(f"check item verdict {verdict!r} is not one of {VERDICTS}")
        return cls(
            name=str(raw.get("name"))[:NAME_LIMIT],
            verdict=verdict,
            value=_number(raw.get("value")),
            threshold=_number(raw.get("threshold")),
            detail=str(raw.get("detail") or "")[:DETAIL_LIMIT],
        )


#: A record's words are cut to these lengths (the pod's annotation stays small).
NAME_LIMIT = 40
DETAIL_LIMIT = 200
ITEMS_LIMIT = 32


@dataclass(frozen=True)
class CheckResult:
    """One check of a pod's node: when (``phase``, ``at`` in the agent's wall clock), how long it took, and its
    items. Its verdict is the worst of theirs: hardware, then environment, then ok."""

    phase: str
    at: float
    seconds: float
    items: tuple[CheckItem, ...]

    @property
    def verdict(self) -> str:
        verdicts = {item.verdict for item in self.items}
        for worst in (HARDWARE, ENVIRONMENT):
            if worst in verdicts:
                return worst
        return OK

    @property
    def failed(self) -> tuple[CheckItem, ...]:
        """The items that did not pass (hardware or environment)."""
        return tuple(item for item in self.items if item.verdict in (HARDWARE, ENVIRONMENT))

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "at": self.at,
            "seconds": round(self.seconds, 3),
            "verdict": self.verdict,
            "items": [item.as_dict() for item in self.items[:ITEMS_LIMIT]],
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CheckResult:
        """The record in ``raw`` (from a pod: bounded, checked); ValueError where it is not one."""
        phase = str(raw.get("phase"))
        if phase not in PHASES:
            raise ValueError(f"check phase {phase!r} is not one of {PHASES}")
        items = raw.get("items")
        if not isinstance(items, list):
            raise ValueError("a check's items are not a list")
        return cls(
            phase=phase,
            at=_number(raw.get("at")) or 0.0,
            seconds=_number(raw.get("seconds")) or 0.0,
            items=tuple(CheckItem.from_dict(item) for item in items[:ITEMS_LIMIT] if isinstance(item, dict)),
        )


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
