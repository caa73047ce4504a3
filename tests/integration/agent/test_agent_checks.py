"""The agent's fault tolerance check on real processes (``python -m trainguard.agent``): a node faulty before
the start never runs the command; a periodic check that finds faulty hardware stops it; after a failure the
post-check tells the hardware from the code; a full disk (a real, small tmpfs) fails the pre-check without
blaming the hardware; bad settings are a clear error."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from agent_harness import wait_for

from trainguard.pod import contract
from trainguard.pod.checks import EXIT_CHECK_FAILED, REASON_HARDWARE, REASON_PRE_CHECK, Ring, Settings

pytestmark = pytest.mark.integration


def _env(faults: Path, settings: Settings) -> dict[str, str]:
    return {
        contract.ENV_FAULT_CHECK: settings.to_json(),
        contract.ENV_FAULT_INJECT: str(faults),
        contract.ENV_NODE_NAME: "node-7",
    }


@pytest.fixture
def faults(tmp_path: Path) -> Path:
    folder = tmp_path / "faults"
    folder.mkdir()
    return folder


def _check(run, phase: str) -> dict:  # type: ignore[no-untyped-def]
    return next(event["check"] for event in run.events("checked") if event["check"]["phase"] == phase)


def test_a_node_faulty_before_the_start_never_runs_the_command(start_agent, faults: Path) -> None:
    (faults / "node-7").write_text("gpu.ecc\n")
    run = start_agent([], ["chatty", "--interval", "0.05"], env=_env(faults, Settings(period=0)))
    assert run.wait_exit() == EXIT_CHECK_FAILED
    assert run.stdout.read_bytes() == b""  # the command never started
    assert not run.events("started")
    check = _check(run, "pre")
    assert check["verdict"] == "hardware"
    ecc = next(item for item in check["items"] if item["name"] == "gpu.ecc")
    assert (ecc["verdict"], ecc["value"], ecc["threshold"]) == ("hardware", 1.0, 0.0)
    final = run.events()[-1]
    assert (final["event"], final["exit_code"], final["reason"]) == (
        "exited",
        EXIT_CHECK_FAILED,
        REASON_HARDWARE,
    )
    assert json.loads((run.directory / "termination-log").read_text())["reason"] == REASON_HARDWARE
    assert (
        b"pre-check failed (faulty hardware): gpu.ecc hardware: read 1 (threshold 0)"
        in run.stderr.read_bytes()
    )


def test_a_periodic_check_that_finds_faulty_hardware_stops_the_command(start_agent, faults: Path) -> None:
    run = start_agent([], ["chatty", "--interval", "0.05"], env=_env(faults, Settings(period=0.5)))
    run.wait_output(b"\n")
    wait_for(lambda: len(run.events("checked")) >= 2, 20, "a periodic check that passed", run.describe)
    assert all(event["check"]["verdict"] == "ok" for event in run.events("checked"))
    (faults / "node-7").write_text("gpu.lost")
    assert run.wait_exit(30) == EXIT_CHECK_FAILED
    last = run.events("checked")[-1]["check"]
    assert (last["phase"], last["verdict"]) == ("periodic", "hardware")
    final = run.events()[-1]
    assert (final["exit_code"], final["reason"]) == (EXIT_CHECK_FAILED, REASON_HARDWARE)
    assert b"periodic check: faulty hardware: gpu.lost" in run.stderr.read_bytes()


@pytest.mark.parametrize("faulty", [True, False], ids=["hardware", "the-code"])
def test_after_a_failure_the_post_check_tells_the_hardware_from_the_code(
    start_agent, faults: Path, faulty: bool
) -> None:
    run = start_agent([], ["say-then-exit", "3", "--seconds", "1.5"], env=_env(faults, Settings(period=0)))
    run.wait_output(b"ready")
    if faulty:
        (faults / "node-7").write_text("gpu.retired")
    assert run.wait_exit() == 3  # the command's own exit code, either way
    post = _check(run, "post")
    final = run.events()[-1]
    if faulty:
        assert post["verdict"] == "hardware"
        assert final["reason"] == REASON_HARDWARE
    else:
        assert post["verdict"] == "ok"
        assert "reason" not in final


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        with contextlib.suppress(OSError):
            subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_fails_the_pre_check_without_blaming_the_hardware(
    start_agent, faults: Path, small_tmpfs: Path
) -> None:
    (small_tmpfs / "filler").write_bytes(b"\0" * (1800 << 10))  # 1.8 of the 2 MiB taken
    settings = Settings(period=0, disk={str(small_tmpfs): 1 << 20})  # the job needs 1 MiB free there
    run = start_agent([], ["chatty"], env=_env(faults, settings))
    assert run.wait_exit() == EXIT_CHECK_FAILED
    assert run.stdout.read_bytes() == b""
    disk = next(item for item in _check(run, "pre")["items"] if item["name"] == "host.disk")
    assert disk["verdict"] == "environment"
    assert disk["value"] < 1.0
    assert run.events()[-1]["reason"] == REASON_PRE_CHECK


def test_bad_settings_are_a_clear_error_and_run_nothing(tmp_path: Path) -> None:
    env = {**os.environ, contract.ENV_FAULT_CHECK: '{"thresholds": {"gpu.bogus": 1}}'}
    marker = tmp_path / "ran"
    done = subprocess.run(
        [sys.executable, "-m", "trainguard.agent", "--", "touch", str(marker)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "TRAINGUARD_FAULT_CHECK: unknown check items ['gpu.bogus']" in done.stderr
    assert "Traceback" not in done.stderr
    assert not marker.exists()


def _free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free on loopback now."""
    for base in range(41000, 60000, 97):
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    probe = held.enter_context(socket.socket())
                    probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise AssertionError("no free ports on loopback")


def test_the_bandwidth_probe_runs_around_the_ring_of_a_roles_pods(start_agent, faults: Path) -> None:
    """Three agents as three pods of a role, each listening on a port of its own: each pre-check sends to the
    next pod (the last to the first) and reports what it carried; a threshold no link reaches fails the
    pre-check as the environment's (PreCheckFailed), never the hardware's."""
    base = _free_ports(4)
    ring = Ring(host="127.0.0.1", port=base, pods=3, step=1, size=8 << 20)
    runs = [
        start_agent(
            [],
            ["chatty", "--interval", "0.2"],
            env={**_env(faults, Settings(period=0, ring=ring)), contract.ENV_REPLICA_INDEX: str(index)},
        )
        for index in range(3)
    ]
    for index, run in enumerate(runs):
        # Each waits for its successor's listener (CONNECT_PATIENCE), then 8 MiB on loopback: seconds at most.
        wait_for(lambda run=run: run.events("checked"), 30, f"pod {index}'s pre-check")
        item = next(item for item in _check(run, "pre")["items"] if item["name"] == "net.bandwidth")
        assert item["verdict"] == "ok", item
        assert item["value"] > item["threshold"] == 25.0, item
        assert item["detail"] == f"to 127.0.0.1:{base + (index + 1) % 3}", item
        wait_for(lambda run=run: run.events("started"), 30, f"pod {index}'s command")

    # One pod of a ring of two, whose next pod is the first's listener still up: no link carries 10^6 MB/s.
    strict = Settings(period=0, ring=replace(ring, pods=2, port=base + 2), thresholds={"net.bandwidth": 1e6})
    run = start_agent([], ["chatty"], env={**_env(faults, strict), contract.ENV_REPLICA_INDEX: "1"})
    assert run.wait_exit() == EXIT_CHECK_FAILED
    assert not run.events("started")
    assert run.events()[-1]["reason"] == REASON_PRE_CHECK
    item = next(item for item in _check(run, "pre")["items"] if item["name"] == "net.bandwidth")
    assert (item["verdict"], item["threshold"]) == ("environment", 1e6)
