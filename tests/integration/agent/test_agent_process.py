"""The agent as a process: exit codes and signals pass through, signals are forwarded, output is relayed
unchanged, and no process of the tree outlives the agent."""

from __future__ import annotations

import json
import os
import signal
import sys

import psutil
import pytest
from agent_harness import gone, wait_for

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("code", [0, 1, 3, 255])
def test_exit_codes_pass_through(start_agent, code: int) -> None:
    run = start_agent([], ["exit", str(code)])
    assert run.wait_exit() == code
    exited = run.events()[-1]
    assert (exited["event"], exited["exit_code"], exited["signal"]) == ("exited", code, None)
    assert json.loads((run.directory / "termination-log").read_text())["exit_code"] == code


def test_the_cli_verb_passes_exit_codes_through(start_agent) -> None:
    run = start_agent([], ["exit", "3"], entry=[sys.executable, "-m", "trainguard.cli.main", "agent"])
    assert run.wait_exit() == 3


@pytest.mark.parametrize(("name", "code"), [("SIGKILL", 137), ("SIGTERM", 143)])
def test_death_by_signal_passes_through_as_128_plus_n(start_agent, name: str, code: int) -> None:
    run = start_agent([], ["kill-self", name])
    assert run.wait_exit() == code
    exited = run.events()[-1]
    assert (exited["exit_code"], exited["signal"], exited["oom"]) == (code, name, False)


def test_signals_to_the_agent_reach_the_command(start_agent) -> None:
    run = start_agent([], ["trap"])
    run.wait_output(b"ready")
    run.process.send_signal(signal.SIGUSR1)
    run.wait_marker("SIGUSR1")
    assert run.process.poll() is None, "SIGUSR1 is passed on, it does not stop anything"
    run.process.send_signal(signal.SIGTERM)
    assert run.wait_exit() == 7  # the command's own answer to SIGTERM
    assert run.markers("SIGTERM")


def test_output_is_relayed_unchanged(start_agent) -> None:
    run = start_agent([], ["bytes"])
    assert run.wait_exit() == 0
    assert run.stdout.read_bytes() == b"out \x00\xff no newline"
    assert run.stderr.read_bytes() == b"err line\n\xfe"


def test_a_command_that_cannot_be_found_exits_127(start_agent, tmp_path) -> None:
    run = start_agent(
        [], ["exit", "0"], entry=[sys.executable, "-m", "trainguard.agent", "--", str(tmp_path / "nope")]
    )
    assert run.wait_exit() == 127


def _tree_pids(run) -> list[psutil.Process]:
    pids_file = run.directory / "pids"
    wait_for(
        lambda: pids_file.exists() and pids_file.read_text().endswith("\n"),
        15,
        "the tree's pids",
        run.describe,
    )
    processes = []
    for pid in map(int, pids_file.read_text().split()):
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    run.extra.extend(processes)
    return processes


def _assert_all_gone(processes: list[psutil.Process]) -> None:
    survivors = wait_for(
        lambda: all(gone(p.pid, p.create_time()) for p in processes) or None,
        2.0,
        "the tree to be gone",
        lambda: str([(p.pid, p.status()) for p in processes if not gone(p.pid, p.create_time())]),
    )
    assert survivors


def test_no_process_outlives_a_command_that_exits(start_agent) -> None:
    """The command leaves a child and a daemon in its own session behind; the agent ends them."""
    run = start_agent(["--grace", "1"], ["tree", "--pids", "pids", "--then", "exit"])
    processes = _tree_pids(run)
    assert run.wait_exit() == 0
    _assert_all_gone(processes)


def test_no_process_outlives_a_stop_even_when_sigterm_is_ignored(start_agent) -> None:
    run = start_agent(["--grace", "1"], ["tree", "--pids", "pids", "--then", "sleep", "--ignore-term"])
    processes = _tree_pids(run)
    run.wait_output(b"ready")
    run.process.send_signal(signal.SIGTERM)
    assert run.wait_exit() == 137  # it ignored SIGTERM, so the grace period ended with SIGKILL
    _assert_all_gone(processes)


def test_no_process_outlives_a_hang_restart(start_agent) -> None:
    run = start_agent(
        ["--hang-timeout", "1", "--grace", "0.5", "--signals", "heartbeat"],
        ["tree", "--pids", "pids", "--then", "sleep", "--ignore-term"],
    )
    processes = _tree_pids(run)
    run.wait_event("restart-in-place")
    _assert_all_gone(processes)


def test_the_command_dies_with_a_killed_agent(start_agent) -> None:
    run = start_agent([], ["trap"])
    pid = run.wait_event("started")["pid"]
    command = psutil.Process(pid)
    run.extra.append(command)
    os.kill(run.process.pid, signal.SIGKILL)
    run.wait_exit()
    _assert_all_gone([command])
