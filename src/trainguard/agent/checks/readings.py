"""Every reading the fault tolerance check takes, through one interface (``Readings``), so that tests feed
recorded readings (``Recorded``) and a test aid injects faults (``Injected``) the same way.

``Machine`` reads this machine: NVML for the GPUs (the driver's ``libnvidia-ml.so.1``, through ctypes; none:
the GPU items are skipped), ``statvfs`` for free space, a timed write and ``fsync`` of 1 MiB, a float loop for
the CPU, a TCP connection for the rendezvous, and a matmul through torch where torch and a GPU are (lazily:
the agent imports nothing it does not need).

Standard library only, Python 3.8: it runs in users' images from the bundle.
"""

from __future__ import annotations

import ctypes
import os
import socket
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainguard.pod import contract
from trainguard.pod.checks import Ring

#: NVML's return codes and the clock throttle reasons that mean hardware (nvml.h).
_NVML_SUCCESS = 0
_NVML_ERROR_GPU_IS_LOST = 15
_NVML_ERROR_NOT_SUPPORTED = 3
_HW_SLOWDOWN, _HW_THERMAL, _HW_POWER_BRAKE = 0x8, 0x40, 0x80
_VOLATILE_ECC, _UNCORRECTED = 1, 1
_RETIRED_PENDING_DOUBLE_BIT = 1
#: A matmul's dense FP32 throughput each card model should give (TFLOP/s, the vendor's public figures), for the
#: compute probe; a model not listed is compared with nothing (the item is skipped).
PEAK_TFLOPS = {"H100": 51.0, "H200": 51.0, "A100": 19.5, "L40S": 91.6, "V100": 15.7, "A10": 31.2}


#: How long the next pod of a ring may take to start listening (the bandwidth probe).
CONNECT_PATIENCE = 12.0
#: How long the job's rendezvous may take to start listening: its store pod starts with the job's pods, and on a
#: busy cluster (its image pulled, its interpreter started) that takes longer than the threshold's 10 s. A
#: store that is not there yet is no fault of this node; what the item measures is the connection once it
#: listens.
RENDEZVOUS_PATIENCE = 120.0


class NotAvailable(Exception):
    """Nothing to read here (no GPU, no driver, no torch): the item is skipped."""


@dataclass(frozen=True)
class Gpus:
    """What NVML says of the devices: how many, and per device its uncorrectable ECC errors, pages pending
    retirement (or row-remap failures), whether it fell off the bus, whether a hardware reason throttles it."""

    count: int
    ecc: tuple[int, ...] = ()
    retired: tuple[int, ...] = ()
    lost: tuple[bool, ...] = ()
    throttled: tuple[bool, ...] = ()
    names: tuple[str, ...] = ()


class Readings:
    """The interface: each method reads one thing, or raises ``NotAvailable``."""

    def gpus(self) -> Gpus:
        raise NotAvailable("no GPU")

    def gpu_compute_share(self) -> float:
        raise NotAvailable("no GPU")

    def free_bytes(self, directory: str) -> int:
        raise NotAvailable(directory)

    def write_seconds(self, directory: str) -> float:
        raise NotAvailable(directory)

    def cpu_share(self) -> float:
        raise NotAvailable("cpu")

    def connect_seconds(self, address: str) -> float:
        raise NotAvailable(address)

    def ring_send(self, ring: Ring) -> tuple[float, str]:
        """MB/s this pod sent to the next pod of its ring, and that pod's address."""
        raise NotAvailable("no ring")


class Machine(Readings):
    """This machine; ``index``: this pod's in its role (the bandwidth probe's place in the ring)."""

    def __init__(self, index: int | None = None) -> None:
        self._cpu_first: float | None = None
        self._nvml: Any = None
        self.index = index

    @classmethod
    def of_pod(cls, env: Mapping[str, str] = os.environ) -> Machine:
        """This machine, as the pod whose index ``contract.ENV_REPLICA_INDEX`` gives."""
        index = env.get(contract.ENV_REPLICA_INDEX, "")
        return cls(int(index) if index.isdigit() else None)

    def gpus(self) -> Gpus:
        nvml = self._library()
        count = ctypes.c_uint(0)
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _NVML_SUCCESS:
            raise NotAvailable("NVML cannot count the devices")
        ecc: list[int] = []
        retired: list[int] = []
        lost: list[bool] = []
        throttled: list[bool] = []
        names: list[str] = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            code = nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle))
            lost.append(code == _NVML_ERROR_GPU_IS_LOST)
            if code != _NVML_SUCCESS:
                ecc.append(0)
                retired.append(0)
                throttled.append(False)
                names.append("")
                continue
            errors = ctypes.c_ulonglong(0)
            got = nvml.nvmlDeviceGetTotalEccErrors(handle, _UNCORRECTED, _VOLATILE_ECC, ctypes.byref(errors))
            lost[-1] = lost[-1] or got == _NVML_ERROR_GPU_IS_LOST
            ecc.append(int(errors.value) if got == _NVML_SUCCESS else 0)
            pending = ctypes.c_uint(0)
            got = nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle, ctypes.byref(pending))
            remap = (ctypes.c_uint(0), ctypes.c_uint(0), ctypes.c_uint(0), ctypes.c_uint(0))
            failed = nvml.nvmlDeviceGetRemappedRows(handle, *(ctypes.byref(v) for v in remap))
            retired.append(
                (int(pending.value) if got == _NVML_SUCCESS else 0)
                + (int(remap[3].value) if failed == _NVML_SUCCESS else 0)
            )
            reasons = ctypes.c_ulonglong(0)
            got = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle, ctypes.byref(reasons))
            throttled.append(
                got == _NVML_SUCCESS and bool(reasons.value & (_HW_SLOWDOWN | _HW_THERMAL | _HW_POWER_BRAKE))
            )
            name = ctypes.create_string_buffer(96)
            got = nvml.nvmlDeviceGetName(handle, name, 96)
            names.append(name.value.decode(errors="replace") if got == _NVML_SUCCESS else "")
        return Gpus(count.value, tuple(ecc), tuple(retired), tuple(lost), tuple(throttled), tuple(names))

    def gpu_compute_share(self) -> float:
        try:
            import torch  # the image's own, where there is one
        except ImportError:
            raise NotAvailable("no torch in this image") from None
        if not torch.cuda.is_available():
            raise NotAvailable("no GPU for torch")
        name = torch.cuda.get_device_name(0)
        peak = next((tflops for model, tflops in PEAK_TFLOPS.items() if model in name), None)
        if peak is None:
            raise NotAvailable(f"no published figure for {name}")
        size = 4096
        a = torch.randn(size, size, device="cuda")
        b = torch.randn(size, size, device="cuda")
        torch.matmul(a, b)
        torch.cuda.synchronize()
        runs = 10
        started = time.perf_counter()
        for _ in range(runs):
            torch.matmul(a, b)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        return (2 * size**3 * runs / seconds / 1e12) / peak

    def free_bytes(self, directory: str) -> int:
        stats = os.statvfs(directory)
        return int(stats.f_bavail * stats.f_frsize)

    def write_seconds(self, directory: str) -> float:
        started = time.monotonic()
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".trainguard-check-") as handle:
            handle.write(b"\0" * (1 << 20))
            handle.flush()
            os.fsync(handle.fileno())
        return time.monotonic() - started

    def cpu_share(self) -> float:
        """A float loop's speed over the first one this agent measured (1.0 the first time): the best of three,
        each in this thread's own CPU time (the machine's other work and the agent's other threads left out)."""
        runs = []
        for _ in range(3):
            started = time.thread_time()
            total = 0.0
            for value in range(100_000):
                total += value * 0.5
            runs.append(time.thread_time() - started)
        took = max(min(runs), 1e-6)
        if self._cpu_first is None:
            self._cpu_first = took
        return self._cpu_first / took

    def connect_seconds(self, address: str) -> float:
        """How long the TCP connection to ``address`` took once something listens there. A rendezvous that is
        not there yet (its pod starting with the job's, its Service's name not resolving yet, no endpoint
        behind it) is tried again every half second for ``RENDEZVOUS_PATIENCE`` seconds; the last error stands
        after that."""
        host, _, port = address.rpartition(":")
        started = time.monotonic()
        while True:
            left = RENDEZVOUS_PATIENCE - (time.monotonic() - started)
            attempt = time.monotonic()
            try:
                with socket.create_connection(
                    (host.strip("[]"), int(port)), timeout=max(min(left, 10.0), 0.5)
                ):
                    return time.monotonic() - attempt
            except OSError:  # refused, a name not resolving yet, unreachable, timed out
                if time.monotonic() - started >= RENDEZVOUS_PATIENCE:
                    raise
                time.sleep(0.5)

    def ring_send(self, ring: Ring) -> tuple[float, str]:
        """Sends ``ring.size`` bytes to the next pod of the ring and waits for its count of them back
        (``trainguard.agent.checks.ring``); the next pod not listening within ``CONNECT_PATIENCE`` seconds (it
        starts later, or is not there yet) is not this pod's fault: nothing to read."""
        if self.index is None or ring.pods < 2:
            raise NotAvailable("a ring of one pod")
        from trainguard.agent.checks.ring import Unreachable, send  # only where a ring is probed

        host, port = ring.address_of(ring.next_of(self.index))
        try:
            return send(host, port, ring.size, CONNECT_PATIENCE), f"{host}:{port}"
        except Unreachable as why:
            raise NotAvailable(f"the next pod is not there yet: {why}") from None

    def _library(self) -> Any:
        if self._nvml is None:
            try:
                nvml = ctypes.CDLL("libnvidia-ml.so.1")
            except OSError:
                raise NotAvailable("no NVML (no GPU driver)") from None
            if nvml.nvmlInit_v2() != _NVML_SUCCESS:
                raise NotAvailable("NVML did not start")
            self._nvml = nvml
        return self._nvml


@dataclass
class Recorded(Readings):
    """Readings recorded beforehand (a test's): what is not given is not available."""

    recorded_gpus: Gpus | None = None
    compute: float | None = None
    free: Mapping[str, int] = field(default_factory=dict)
    writes: Mapping[str, float] = field(default_factory=dict)
    cpu: float | None = None
    connects: Mapping[str, float] = field(default_factory=dict)
    #: MB/s to the next pod of the ring.
    ring: float | None = None
    #: Item -> an exception to raise, or seconds to sleep first (a broken or a hung reading).
    broken: Mapping[str, BaseException] = field(default_factory=dict)
    slow: Mapping[str, float] = field(default_factory=dict)

    def _misbehave(self, item: str) -> None:
        if item in self.slow:
            time.sleep(self.slow[item])
        if item in self.broken:
            raise self.broken[item]

    def gpus(self) -> Gpus:
        self._misbehave("gpu")
        if self.recorded_gpus is None:
            raise NotAvailable("no GPU")
        return self.recorded_gpus

    def gpu_compute_share(self) -> float:
        self._misbehave("gpu.compute")
        if self.compute is None:
            raise NotAvailable("no GPU")
        return self.compute

    def free_bytes(self, directory: str) -> int:
        self._misbehave("host.disk")
        if directory not in self.free:
            raise NotAvailable(directory)
        return self.free[directory]

    def write_seconds(self, directory: str) -> float:
        self._misbehave("host.write")
        if directory not in self.writes:
            raise NotAvailable(directory)
        return self.writes[directory]

    def cpu_share(self) -> float:
        self._misbehave("host.cpu")
        if self.cpu is None:
            raise NotAvailable("cpu")
        return self.cpu

    def connect_seconds(self, address: str) -> float:
        self._misbehave("net.rendezvous")
        if address not in self.connects:
            raise NotAvailable(address)
        return self.connects[address]

    def ring_send(self, ring: Ring) -> tuple[float, str]:
        self._misbehave("net.bandwidth")
        if self.ring is None:
            raise NotAvailable("no ring")
        return self.ring, ring.host


def injected_items(env: Mapping[str, str] = os.environ) -> frozenset[str]:
    """The items a test aid says read as faulty on this pod's node (``contract.ENV_FAULT_INJECT``'s file
    named after ``contract.ENV_NODE_NAME``; names one per line or comma separated); none where unset."""
    folder, node = env.get(contract.ENV_FAULT_INJECT), env.get(contract.ENV_NODE_NAME)
    if not folder or not node or "/" in node:
        return frozenset()
    try:
        text = (Path(folder) / node).read_text()
    except (OSError, UnicodeDecodeError):
        return frozenset()
    return frozenset(part.strip() for part in text.replace(",", "\n").split() if part.strip())


def names(items: Iterable[str]) -> str:
    return ", ".join(sorted(items))
