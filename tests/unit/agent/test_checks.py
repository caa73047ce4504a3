"""One fault tolerance check (``trainguard.agent.checks.run``) from recorded readings: each item's verdict
against its threshold, a broken or hung reading bounded and recorded ``environment`` (never ``hardware``),
injected faults, and this machine's own readings (free space, a write, a real connection)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainguard.agent.checks import readings
from trainguard.agent.checks.readings import Gpus, Machine, Recorded, injected_items
from trainguard.agent.checks.ring import Listener, Unreachable, send
from trainguard.agent.checks.run import INJECTED, run_check, words
from trainguard.pod import contract
from trainguard.pod.checks import ENVIRONMENT, HARDWARE, ITEMS, OK, SKIPPED, Ring, Settings

HEALTHY = Gpus(count=8, ecc=(0,) * 8, retired=(0,) * 8, lost=(False,) * 8, throttled=(False,) * 8)


def _verdicts(readings: Recorded, settings: Settings | None = None) -> dict[str, tuple[str, float | None]]:
    result = run_check(settings or Settings(gpus=8), "pre", readings)
    return {item.name: (item.verdict, item.value) for item in result.items}


@pytest.mark.parametrize(
    ("gpus", "item", "expected"),
    [
        (HEALTHY, "gpu.ecc", (OK, 0.0)),
        (Gpus(8, ecc=(0, 2, 0, 0, 0, 0, 0, 1)), "gpu.ecc", (HARDWARE, 3.0)),  # uncorrectable ECC errors
        (Gpus(8, retired=(0,) * 7 + (1,)), "gpu.retired", (HARDWARE, 1.0)),  # a page pending retirement
        (Gpus(8, lost=(False, True, *(False,) * 6)), "gpu.lost", (HARDWARE, 1.0)),  # fallen off the bus
        (Gpus(8, throttled=(True, *(False,) * 7)), "gpu.throttle", (HARDWARE, 1.0)),  # a hardware slowdown
        (Gpus(7), "gpu.count", (HARDWARE, 7.0)),  # 8 asked for, 7 seen
        (HEALTHY, "gpu.count", (OK, 8.0)),
    ],
)
def test_recorded_nvml_readings_give_each_gpu_item_its_verdict(
    gpus: Gpus, item: str, expected: tuple[str, float]
) -> None:
    assert _verdicts(Recorded(recorded_gpus=gpus, compute=0.9))[item] == expected


def test_without_a_gpu_the_gpu_items_are_skipped_and_the_check_passes() -> None:
    result = run_check(Settings(), "pre", Recorded(cpu=1.0))
    verdicts = {item.name: item.verdict for item in result.items}
    assert {name: verdict for name, verdict in verdicts.items() if name.startswith("gpu.")} == dict.fromkeys(
        ("gpu.count", "gpu.ecc", "gpu.retired", "gpu.lost", "gpu.throttle", "gpu.compute"), SKIPPED
    )
    assert verdicts["host.cpu"] == OK
    assert result.verdict == OK


@pytest.mark.parametrize(
    ("readings", "item", "verdict"),
    [
        (
            Recorded(recorded_gpus=HEALTHY, compute=0.3),
            "gpu.compute",
            HARDWARE,
        ),  # under half the card model's throughput
        (Recorded(recorded_gpus=HEALTHY, compute=0.8), "gpu.compute", OK),
        (Recorded(free={"/data": 1 << 20}), "host.disk", ENVIRONMENT),  # 1 MiB of the 2 MiB needed
        (Recorded(free={"/data": 4 << 20}), "host.disk", OK),
        (Recorded(writes={"/data": 9.0}), "host.write", ENVIRONMENT),  # a hung mount
        (Recorded(cpu=0.1), "host.cpu", HARDWARE),
        (Recorded(connects={"rdzv:29400": 0.01}), "net.rendezvous", OK),
        (Recorded(ring=900.0), "net.bandwidth", OK),
        (Recorded(ring=9.0), "net.bandwidth", ENVIRONMENT),  # a link fallen back to 100 Mb/s, or worse
        (Recorded(), "net.bandwidth", SKIPPED),  # the next pod not there yet
    ],
)
def test_host_and_network_items_judged_against_their_thresholds(
    readings: Recorded, item: str, verdict: str
) -> None:
    settings = Settings(gpus=1, disk={"/data": 2 << 20}, rendezvous="rdzv:29400", ring=RING)
    assert _verdicts(readings, settings)[item][0] == verdict


RING = Ring(host="job-worker-{index}.job", pods=4)


@pytest.mark.parametrize("phase", ["periodic", "post"])
def test_the_bandwidth_probe_runs_in_the_pre_check_alone(phase: str) -> None:
    """It needs the job's other pods, which a later check leaves to their training."""
    readings = Recorded(ring=900.0, cpu=1.0)
    assert "net.bandwidth" in {item.name for item in run_check(Settings(ring=RING), "pre", readings).items}
    assert "net.bandwidth" not in {
        item.name for item in run_check(Settings(ring=RING), phase, readings).items
    }


def test_without_a_ring_the_bandwidth_probe_is_skipped_saying_why() -> None:
    item = next(
        i for i in run_check(Settings(), "pre", Recorded(ring=900.0)).items if i.name == "net.bandwidth"
    )
    assert (item.verdict, item.detail) == (
        SKIPPED,
        "the job's pods share one address here (the local runtime)",
    )


@pytest.mark.parametrize(
    ("index", "address"), [(0, ("job-worker-1.job", 29431)), (3, ("job-worker-0.job", 29431))]
)
def test_each_pod_of_the_ring_sends_to_the_next_and_the_last_to_the_first(
    index: int, address: tuple[str, int]
) -> None:
    assert RING.address_of(RING.next_of(index)) == address
    spread = Ring(host="127.0.0.1", port=5000, pods=3, step=1)
    assert [spread.address_of(spread.next_of(i)) for i in range(3)] == [
        ("127.0.0.1", 5001), ("127.0.0.1", 5002), ("127.0.0.1", 5000)
    ]  # fmt: skip
    assert Ring.from_dict(spread.as_dict()) == spread
    assert Settings.from_json(Settings(ring=spread).to_json()).ring == spread


def test_a_probe_to_a_port_nobody_listens_on_is_unreachable_and_a_listener_counts_what_came(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        closed = taken.getsockname()[1]
    with pytest.raises(Unreachable):
        send("127.0.0.1", closed, 1 << 20, patience=0.6)
    listener = Listener(0, "127.0.0.1")
    try:
        assert send("127.0.0.1", listener.port, 3 << 20, patience=2.0) > 0
    finally:
        listener.close()
    # A pod whose next pod is not there is not at fault: the item is skipped, not failed.
    monkeypatch.setattr(readings, "CONNECT_PATIENCE", 0.6)
    with pytest.raises(readings.NotAvailable, match="the next pod is not there yet"):
        Machine(1).ring_send(Ring(host="127.0.0.1", port=closed - 2, pods=3, step=1))


def test_a_threshold_set_by_the_job_is_the_one_judged_against() -> None:
    readings = Recorded(recorded_gpus=HEALTHY, compute=0.6)
    assert _verdicts(readings, Settings(gpus=1))["gpu.compute"][0] == OK
    assert (
        _verdicts(readings, Settings(gpus=1, thresholds={"gpu.compute": 0.7}))["gpu.compute"][0] == HARDWARE
    )
    assert "gpu.compute" not in _verdicts(readings, Settings(gpus=1, disabled=("gpu.compute",)))


def test_a_broken_reading_is_environment_never_hardware() -> None:
    readings = Recorded(recorded_gpus=HEALTHY, broken={"gpu": OSError("NVML went away")})
    result = run_check(Settings(gpus=8), "periodic", readings)
    ecc = next(item for item in result.items if item.name == "gpu.ecc")
    assert ecc.verdict == ENVIRONMENT
    assert "OSError: NVML went away" in ecc.detail
    assert result.verdict == ENVIRONMENT


def test_a_hung_reading_is_cut_at_the_timeout_and_recorded_environment() -> None:
    readings = Recorded(cpu=1.0, slow={"host.cpu": 30.0})
    started = time.monotonic()
    result = run_check(Settings(timeout=0.5), "pre", readings)
    assert time.monotonic() - started < 5
    cpu = next(item for item in result.items if item.name == "host.cpu")
    assert (cpu.verdict, cpu.detail) == (ENVIRONMENT, "timed out after 0.5 s (faultCheck.timeoutSeconds)")
    assert result.verdict == ENVIRONMENT
    assert "host.cpu environment: read nothing" in words(result)


def test_an_injected_item_reads_past_its_threshold(tmp_path: Path) -> None:
    (tmp_path / "node-3").write_text("gpu.ecc, host.disk\n")
    env = {contract.ENV_FAULT_INJECT: str(tmp_path), contract.ENV_NODE_NAME: "node-3"}
    injected = injected_items(env)
    assert injected == {"gpu.ecc", "host.disk"}
    result = run_check(Settings(), "pre", Recorded(), injected)
    failed = {item.name: (item.verdict, item.value, item.threshold, item.detail) for item in result.failed}
    assert failed == {
        "gpu.ecc": (HARDWARE, 1.0, 0.0, INJECTED),
        "host.disk": (ENVIRONMENT, -0.5, 1.0, INJECTED),
    }
    assert result.verdict == HARDWARE
    assert (
        injected_items({contract.ENV_FAULT_INJECT: str(tmp_path), contract.ENV_NODE_NAME: "node-4"}) == set()
    )
    assert injected_items({}) == set()


def test_this_machines_readings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readings, "RENDEZVOUS_PATIENCE", 1.0)  # a rendezvous not listening: tried for 1 s
    machine = Machine()
    assert machine.free_bytes(str(tmp_path)) > 0
    assert 0 < machine.write_seconds(str(tmp_path)) < 30
    assert machine.cpu_share() == 1.0  # the first measurement is the reference
    with socket.create_server(("127.0.0.1", 0)) as server:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        reachable = run_check(Settings(rendezvous=address), "pre", machine)
    closed = run_check(Settings(rendezvous=address), "pre", machine)  # nobody listens there any more
    assert {i.name: i.verdict for i in reachable.items}["net.rendezvous"] == OK
    refused = next(item for item in closed.items if item.name == "net.rendezvous")
    assert refused.verdict == ENVIRONMENT
    assert "ConnectionRefusedError" in refused.detail


def test_a_rendezvous_that_starts_listening_a_moment_later_is_reached() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    late = threading.Timer(1.0, lambda: servers.append(socket.create_server(("127.0.0.1", port))))
    servers: list[socket.socket] = []
    late.start()
    started = time.monotonic()
    try:
        seconds = Machine().connect_seconds(f"127.0.0.1:{port}")
    finally:
        late.join()
        for server in servers:
            server.close()
    assert time.monotonic() - started >= 1.0  # waited for it to listen ...
    assert seconds < 0.5  # ... and measured the connection (loopback: milliseconds), not the wait


def test_a_rendezvous_name_that_does_not_resolve_is_tried_for_the_whole_patience(monkeypatch: Any) -> None:
    """A just-created Service's name may not resolve for a moment: tried again, not failed at once."""
    monkeypatch.setattr(readings, "RENDEZVOUS_PATIENCE", 1.2)
    started = time.monotonic()
    with pytest.raises(socket.gaierror):
        Machine().connect_seconds("no-such-name.invalid:29400")
    assert time.monotonic() - started >= 1.2


_RINGS = st.builds(
    Ring,
    host=st.sampled_from(["job-worker-{index}.job", "127.0.0.1"]),
    port=st.integers(1, 65535),
    pods=st.integers(1, 64),
    step=st.integers(0, 4),
    size=st.integers(1, 1 << 30),
)


@given(
    st.builds(
        Settings,
        period=st.sampled_from([0.0, 60.0, 300.0, 12.5]),
        timeout=st.sampled_from([60.0, 5.0]),
        thresholds=st.dictionaries(
            st.sampled_from(sorted(ITEMS)), st.floats(0, 1e6, allow_nan=False), max_size=3
        ),
        disabled=st.lists(st.sampled_from(sorted(ITEMS)), max_size=3, unique=True).map(tuple),
        disk=st.dictionaries(st.sampled_from(["/data", "/tmp"]), st.integers(0, 1 << 40), max_size=2),
        gpus=st.integers(0, 8),
        rendezvous=st.sampled_from([None, "job-rdzv.ns.svc:29400"]),
        stragglers=st.booleans(),
        ring=st.none() | _RINGS,
    )
)
def test_the_settings_read_back_whole_from_json_that_leaves_out_their_defaults(settings: Settings) -> None:
    text = settings.to_json()
    assert Settings.from_json(text) == settings
    assert " " not in text.replace("{index}", "")  # compact: it goes on every pod's command line
    assert set(json.loads(text)) <= set(Settings()._as_dict())


def test_settings_at_their_defaults_are_an_empty_object() -> None:
    assert Settings().to_json() == "{}"
    assert Settings(ring=Ring("h")).to_json() == '{"ring":{"host":"h"}}'
