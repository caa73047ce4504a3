"""One fault tolerance check of the pod's node: every item (``trainguard.pod.checks.ITEMS`` but those the job
turned off, and the pre-check's own (``PRE_ONLY``) in a later check) read through ``Readings`` and judged against its threshold, within ``Settings.timeout``.

A check is bounded: the items run in a daemon thread, and an item still running when the time is up is
recorded ``environment`` ("timed out"); one whose reading raised is ``environment`` with the error. A broken
check never says ``hardware``: it isolates nothing. An item the test aid injected (``readings.injected_items``)
reads past its threshold, whatever the machine says.

Standard library only, Python 3.8: it runs in users' images from the bundle.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from trainguard.agent.checks.readings import Gpus, NotAvailable, Readings
from trainguard.pod.checks import (
    ENVIRONMENT,
    ITEMS,
    OK,
    PRE,
    PRE_ONLY,
    SKIPPED,
    CheckItem,
    CheckResult,
    ItemSpec,
    Settings,
)

INJECTED = "injected (trainguard chaos hardware-fault)"
if TYPE_CHECKING:  # Python 3.8 cannot subscript collections.abc.Callable at run time
    #: Per item: what reads its value (None: nothing to check here, with why).
    Reader = Callable[[Readings, Settings, "_Shared"], tuple[float | None, str]]


class _Shared:
    """Readings several items share within one check (NVML is read once)."""

    def __init__(self, readings: Readings) -> None:
        self._readings = readings
        self._gpus: Gpus | None = None

    def gpus(self) -> Gpus:
        if self._gpus is None:
            self._gpus = self._readings.gpus()
        return self._gpus


def _gpu_count(readings: Readings, settings: Settings, shared: _Shared) -> tuple[float | None, str]:
    if settings.gpus <= 0:
        return None, NO_GPU
    return float(shared.gpus().count), f"the pod asked for {settings.gpus}"


#: A pod that asked for no GPU is given none (its node's GPUs are other pods'): its GPU items are skipped.
NO_GPU = "the pod asked for no GPU"


def _per_device(field: str) -> Reader:
    def read(readings: Readings, settings: Settings, shared: _Shared) -> tuple[float | None, str]:
        if settings.gpus <= 0:
            return None, NO_GPU
        gpus = shared.gpus()
        values = getattr(gpus, field)
        bad = [index for index, value in enumerate(values) if value]
        total = float(sum(int(value) for value in values))
        return total, f"devices {bad}" if bad else f"{gpus.count} devices"

    return read


def _gpu_compute(readings: Readings, settings: Settings, shared: _Shared) -> tuple[float | None, str]:
    if settings.gpus <= 0:
        return None, NO_GPU
    shared.gpus()  # no NVML, no GPU: nothing to import torch for
    return readings.gpu_compute_share(), "matmul throughput over the card model's"


def _host_disk(readings: Readings, settings: Settings, shared: _Shared) -> tuple[float | None, str]:
    if not settings.disk:
        return None, "the job named no directory (faultCheck.disk)"
    shares = {
        directory: readings.free_bytes(directory) / max(need, 1) for directory, need in settings.disk.items()
    }
    worst = min(shares, key=lambda directory: shares[directory])
    return shares[worst], f"{worst}: {shares[worst]:.2f} of the {settings.disk[worst]} bytes needed free"


def _host_write(readings: Readings, settings: Settings, shared: _Shared) -> tuple[float | None, str]:
    if not settings.disk:
        return None, "the job named no directory (faultCheck.disk)"
    seconds = {directory: readings.write_seconds(directory) for directory in settings.disk}
    worst = max(seconds, key=lambda directory: seconds[directory])
    return seconds[worst], worst


def _host_cpu(readings: Readings, settings: Settings, shared: _Shared) -> tuple[float | None, str]:
    return readings.cpu_share(), "a float loop's speed over the agent's first"


def _rendezvous(readings: Readings, settings: Settings, shared: _Shared) -> tuple[float | None, str]:
    if not settings.rendezvous:
        return None, "the job has no rendezvous"
    return readings.connect_seconds(settings.rendezvous), settings.rendezvous


def _bandwidth(readings: Readings, settings: Settings, shared: _Shared) -> tuple[float | None, str]:
    if settings.ring is None:
        return None, "the job's pods share one address here (the local runtime)"
    value, to = readings.ring_send(settings.ring)
    return value, f"to {to}"


READERS: dict[str, Reader] = {
    "gpu.count": _gpu_count,
    "gpu.ecc": _per_device("ecc"),
    "gpu.retired": _per_device("retired"),
    "gpu.lost": _per_device("lost"),
    "gpu.throttle": _per_device("throttled"),
    "gpu.compute": _gpu_compute,
    "host.disk": _host_disk,
    "host.write": _host_write,
    "host.cpu": _host_cpu,
    "net.rendezvous": _rendezvous,
    "net.bandwidth": _bandwidth,
}


def judge(
    name: str, settings: Settings, readings: Readings, shared: _Shared, injected: Collection[str]
) -> CheckItem:
    """One item's reading and verdict; never raises."""
    spec = ITEMS[name]
    threshold = _threshold(spec, settings)
    if name in injected:
        return CheckItem(name, spec.verdict, _past(spec, threshold), threshold, INJECTED)
    try:
        value, detail = READERS[name](readings, settings, shared)
    except NotAvailable as why:
        return CheckItem(name, SKIPPED, None, threshold, str(why))
    except Exception as error:  # a broken reading: environment, never hardware
        return CheckItem(
            name, ENVIRONMENT, None, threshold, f"the check failed: {type(error).__name__}: {error}"
        )
    if value is None:
        return CheckItem(name, SKIPPED, None, threshold, detail)
    return CheckItem(
        name, spec.verdict if spec.fails(value, threshold) else OK, round(value, 6), threshold, detail
    )


def _threshold(spec: ItemSpec, settings: Settings) -> float:
    if spec.name == "gpu.count":
        return float(settings.gpus)
    return settings.threshold(spec.name)


def _past(spec: ItemSpec, threshold: float) -> float:
    """A value past ``threshold`` for an injected fault."""
    return threshold + 1 if spec.above else threshold / 2 - 1


def run_check(
    settings: Settings,
    phase: str,
    readings: Readings,
    injected: Collection[str] = (),
    clock: Callable[[], float] = time.time,
) -> CheckResult:
    """Every item not turned off, within ``settings.timeout``; the items still running then are recorded
    ``environment``, timed out."""
    names = [
        name for name in ITEMS if name not in settings.disabled and (phase == PRE or name not in PRE_ONLY)
    ]
    done: dict[str, CheckItem] = {}
    shared = _Shared(readings)
    started_at, started = clock(), time.monotonic()

    def work() -> None:
        for name in names:
            done[name] = judge(name, settings, readings, shared, injected)

    worker = threading.Thread(target=work, name="trainguard-check", daemon=True)
    worker.start()
    worker.join(settings.timeout)
    took = time.monotonic() - started
    items = tuple(
        done.get(name)
        or CheckItem(
            name,
            ENVIRONMENT,
            None,
            None,
            f"timed out after {settings.timeout:g} s (faultCheck.timeoutSeconds)",
        )
        for name in names
    )
    return CheckResult(phase, started_at, took, items)


def words(result: CheckResult) -> str:
    """What a failed check found, for the agent's stderr: item, value, threshold, detail."""
    return "; ".join(
        f"{item.name} {item.verdict}: read {_number(item.value)} (threshold {_number(item.threshold)})"
        + (f", {item.detail}" if item.detail else "")
        for item in result.failed
    )


def _number(value: float | None) -> str:
    return "nothing" if value is None else f"{value:g}"
