"""What the GPU says about the workers: NVML, read through ctypes (the driver's ``libnvidia-ml.so.1``, present
wherever a GPU is; no Python package), for the hang detector.

Standard library only, Python 3.8: it runs in users' images from the agent's bundle.
"""

from __future__ import annotations

import ctypes
from dataclasses import asdict, dataclass
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
#: GPM (GPU performance monitoring, Hopper and later): the share of the SMs that were busy.
GPM_SM_UTIL = 2
GPM_METRICS_GET_VERSION = 1
GPM_SUPPORT_VERSION = 1
#: Room for the metrics of one query (NVML fills ``numMetrics`` of them).
_GPM_METRIC_SLOTS = 210


class NvmlUnavailable(RuntimeError):
    """No NVML here (no driver, no GPU), or a call failed."""


@dataclass(frozen=True)
class GpuSample:
    """One look at a device, for one process."""

    #: The share of the last sample period in which any kernel ran on the device, percent.
    utilization: int | None
    #: The same for this process alone (the highest of NVML's samples since the previous look), percent.
    process_utilization: int | None
    #: The power drawn over the card's enforced limit.
    power_fraction: float | None
    #: The share of the SMs busy since the previous look (GPM), percent; None where the card has no GPM.
    sm_activity: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _ProcessSample(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("timeStamp", ctypes.c_ulonglong),
        ("smUtil", ctypes.c_uint),
        ("memUtil", ctypes.c_uint),
        ("encUtil", ctypes.c_uint),
        ("decUtil", ctypes.c_uint),
    ]


class _GpmSupport(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("isSupportedDevice", ctypes.c_uint)]


class _GpmMetricInfo(ctypes.Structure):
    _fields_ = [("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p), ("unit", ctypes.c_char_p)]


class _GpmMetric(ctypes.Structure):
    _fields_ = [
        ("metricId", ctypes.c_uint),
        ("nvmlReturn", ctypes.c_int),
        ("value", ctypes.c_double),
        ("metricInfo", _GpmMetricInfo),
    ]


class _GpmMetricsGet(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("numMetrics", ctypes.c_uint),
        ("sample1", ctypes.c_void_p),
        ("sample2", ctypes.c_void_p),
        ("metrics", _GpmMetric * _GPM_METRIC_SLOTS),
    ]


class Nvml:
    """The driver's NVML, loaded once; ``sample`` looks at one device for one process."""

    def __init__(self, library: Any) -> None:
        self._lib = library
        self._handles: dict[int, ctypes.c_void_p] = {}
        self._last_seen: dict[int, int] = {}
        self._gpm: dict[int, ctypes.c_void_p | None] = {}
        self._call("nvmlInit_v2")

    @classmethod
    def load(cls) -> Nvml:
        try:
            library = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as error:
            raise NvmlUnavailable(f"NVML is not here ({error})") from None
        return cls(library)

    def driver_version(self) -> str:
        buffer = ctypes.create_string_buffer(96)
        self._call("nvmlSystemGetDriverVersion", buffer, ctypes.c_uint(96))
        return buffer.value.decode()

    def device_count(self) -> int:
        count = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        return int(count.value)

    def sample_all(self) -> tuple[GpuSample, ...]:
        """Every device this process can see (a container sees the ones it was given)."""
        return tuple(self.sample(index) for index in range(self.device_count()))

    def sample(self, index: int, pid: int | None = None) -> GpuSample:
        handle = self._handle(index)
        utilization = _Utilization()
        device_util = None
        if self._try("nvmlDeviceGetUtilizationRates", handle, ctypes.byref(utilization)):
            device_util = int(utilization.gpu)
        power = ctypes.c_uint()
        limit = ctypes.c_uint()
        fraction = None
        if (
            self._try("nvmlDeviceGetPowerUsage", handle, ctypes.byref(power))
            and self._try("nvmlDeviceGetEnforcedPowerLimit", handle, ctypes.byref(limit))
            and limit.value
        ):
            fraction = round(power.value / limit.value, 4)
        return GpuSample(
            utilization=device_util,
            process_utilization=None if pid is None else self._process_utilization(index, handle, pid),
            power_fraction=fraction,
            sm_activity=self._sm_activity(index, handle),
        )

    # -- the parts ------------------------------------------------------------------------------------------

    def _handle(self, index: int) -> ctypes.c_void_p:
        if index not in self._handles:
            handle = ctypes.c_void_p()
            self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
            self._handles[index] = handle
        return self._handles[index]

    def _process_utilization(self, index: int, handle: ctypes.c_void_p, pid: int) -> int | None:
        since = ctypes.c_ulonglong(self._last_seen.get(index, 0))
        count = ctypes.c_uint(0)
        status = self._lib.nvmlDeviceGetProcessUtilization(handle, None, ctypes.byref(count), since)
        if status == NVML_ERROR_NOT_FOUND:
            return 0  # no kernel of any process since the last look
        if status not in (NVML_SUCCESS, NVML_ERROR_INSUFFICIENT_SIZE) or count.value == 0:
            return None
        samples = (_ProcessSample * count.value)()
        status = self._lib.nvmlDeviceGetProcessUtilization(handle, samples, ctypes.byref(count), since)
        if status == NVML_ERROR_NOT_FOUND:
            return 0
        if status != NVML_SUCCESS:
            return None
        found = [samples[i] for i in range(count.value)]
        if found:
            self._last_seen[index] = max(s.timeStamp for s in found)
        mine = [int(s.smUtil) for s in found if s.pid == pid]
        return max(mine) if mine else 0

    def _sm_activity(self, index: int, handle: ctypes.c_void_p) -> float | None:
        if index not in self._gpm:
            support = _GpmSupport(version=GPM_SUPPORT_VERSION)
            supported = self._try("nvmlGpmQueryDeviceSupport", handle, ctypes.byref(support))
            self._gpm[index] = None
            if not (supported and support.isSupportedDevice):
                return None
            self._gpm[index] = self._gpm_sample(handle)
            return None
        previous = self._gpm[index]
        if previous is None:
            return None
        current = self._gpm_sample(handle)
        if current is None:
            return None
        query = _GpmMetricsGet(
            version=GPM_METRICS_GET_VERSION, numMetrics=1, sample1=previous, sample2=current
        )
        query.metrics[0].metricId = GPM_SM_UTIL
        ok = (
            self._try("nvmlGpmMetricsGet", ctypes.byref(query))
            and query.metrics[0].nvmlReturn == NVML_SUCCESS
        )
        self._lib.nvmlGpmSampleFree(previous)
        self._gpm[index] = current
        return round(query.metrics[0].value, 2) if ok else None

    def _gpm_sample(self, handle: ctypes.c_void_p) -> ctypes.c_void_p | None:
        sample = ctypes.c_void_p()
        if not self._try("nvmlGpmSampleAlloc", ctypes.byref(sample)):
            return None
        if not self._try("nvmlGpmSampleGet", handle, sample):
            self._lib.nvmlGpmSampleFree(sample)
            return None
        return sample

    def _try(self, name: str, *args: Any) -> bool:
        function = getattr(self._lib, name, None)
        return function is not None and function(*args) == NVML_SUCCESS

    def _call(self, name: str, *args: Any) -> None:
        function = getattr(self._lib, name, None)
        if function is None:
            raise NvmlUnavailable(f"NVML has no {name}")
        status = function(*args)
        if status != NVML_SUCCESS:
            raise NvmlUnavailable(f"{name} failed with NVML error {status}")
