"""The hang detector on a GPU, from observations recorded on an NVIDIA H200
(``benchmarks/gpu_hang_signal.py``, ``data/gpu_hang_signal-h200.json``): a process waiting in a collective's
kernel spins a core in its CUDA synchronize, so the CPU alone reads it as work; the devices' SM activity (or,
without GPM, their power) tells the wait from the work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.agent.detector import (
    GpuActivity,
    HangDetector,
    Observation,
    gpu_activity,
)
from trainguard.agent.gpu import GpuSample
from trainguard.pod.hangsignal import HangSignal

RECORDED = json.loads((Path(__file__).parent / "data" / "gpu_hang_signal-h200.json").read_text())
TIMEOUT = 2.0


def samples(phase: str, gpm: bool = True) -> list[tuple[GpuSample, float]]:
    """The phase's samples (the first of each phase straddles the change: dropped), with their CPU seconds."""
    found = []
    for raw in RECORDED["phases"][phase][1:]:
        sample = GpuSample(
            utilization=raw["utilization"],
            process_utilization=raw["process_utilization"],
            power_fraction=raw["power_fraction"],
            sm_activity=raw["sm_activity"] if gpm else None,
        )
        found.append((sample, raw["cpu_s"]))
    return found


def replay(phase: str, *, gpus: bool, gpm: bool = True, floor_from_idle: bool = False):
    """The phase's samples fed to a fresh detector with the CPU signal only, one per period (0.5 s); returns
    the hang, if any, at the end."""
    watcher = HangDetector(timeout=TIMEOUT, signals=frozenset({HangSignal.CPU}), started_at=0.0)
    cpu = 0.0
    now = 0.0
    if floor_from_idle:  # the attempt began idle (its start): the floor of the power
        idle, _ = samples("idle", gpm)[0]
        watcher.observe(Observation(now=0.0, heartbeats={}, cpu_seconds=0.0, gpus=[idle] if gpus else None))
    assessment = None
    for _ in range(2):  # the recording twice over: longer than the timeout
        for sample, used in samples(phase, gpm):
            now += 0.5
            cpu += used
            assessment = watcher.observe(
                Observation(now=now, heartbeats={}, cpu_seconds=cpu, gpus=[sample] if gpus else None)
            )
    assert now > TIMEOUT
    return assessment.hang if assessment else None


def test_the_recording_is_of_a_gpu_with_gpm() -> None:
    assert "H200" in RECORDED["gpu"]
    assert set(RECORDED["phases"]) == {"idle", "compute", "waiting", "host_blocked"}


def test_without_the_gpu_a_spinning_wait_reads_as_work() -> None:
    """Today's blind spot, recorded: the waiting phase used a full core, so the CPU signal never fires."""
    assert replay("waiting", gpus=False) is None


@pytest.mark.parametrize("gpm", [True, False])
def test_with_the_gpu_a_kernel_that_polls_is_a_hang_and_compute_is_not(gpm: bool) -> None:
    hang = replay("waiting", gpus=True, gpm=gpm, floor_from_idle=True)
    assert hang is not None
    assert hang.signal is HangSignal.CPU
    assert hang.idle_seconds >= TIMEOUT
    assert replay("compute", gpus=True, gpm=gpm, floor_from_idle=True) is None


def test_without_gpm_a_device_never_seen_idle_counts_its_kernel_as_work() -> None:
    """No idle power to compare with: nothing is taken for a wait (no restart on a guess)."""
    assert replay("waiting", gpus=True, gpm=False) is None
    assert replay("waiting", gpus=True, gpm=True) is not None  # GPM needs no floor


def test_a_host_blocked_outside_cuda_is_a_hang_as_before() -> None:
    assert replay("host_blocked", gpus=True) is not None
    assert replay("host_blocked", gpus=False) is not None


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        ("idle", GpuActivity.IDLE),
        ("compute", GpuActivity.COMPUTING),
        ("waiting", GpuActivity.WAITING),
        ("host_blocked", GpuActivity.IDLE),
    ],
)
def test_each_recorded_phase_is_told_apart(phase: str, expected: GpuActivity) -> None:
    floor = min(raw["power_fraction"] for raw in RECORDED["phases"]["idle"])
    for gpm in (True, False):
        for sample, _ in samples(phase, gpm):
            assert gpu_activity([sample], floor) is expected, (phase, gpm, sample)


def test_several_devices_compute_if_any_does_and_wait_if_any_waits() -> None:
    computing, waiting, idle = (samples(p)[0][0] for p in ("compute", "waiting", "idle"))
    assert gpu_activity([idle, waiting, computing], 0.17) is GpuActivity.COMPUTING
    assert gpu_activity([idle, waiting], 0.17) is GpuActivity.WAITING
    assert gpu_activity([idle], 0.17) is GpuActivity.IDLE
    assert gpu_activity([], 0.17) is None
    assert gpu_activity([GpuSample(None, None, None, None)], None) is None


def test_without_a_driver_nvml_is_unavailable_and_the_cpu_alone_decides() -> None:
    import ctypes.util

    from trainguard.agent.gpu import Nvml, NvmlUnavailable

    if ctypes.util.find_library("nvidia-ml") is None:
        with pytest.raises(NvmlUnavailable, match="NVML is not here"):
            Nvml.load()
    else:  # a machine with a GPU: it samples
        assert all(isinstance(s, GpuSample) for s in Nvml.load().sample_all())
