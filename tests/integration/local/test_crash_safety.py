"""kill -9 of the control plane at random moments during restarts and scaling: nothing lost, nothing twice.

Each round injects a fault (or a scale request), waits a random moment, kills the control plane with
SIGKILL, checks that no pod runs twice while no control plane runs, and then lets the next command start
a new control plane, which must carry on from where the old one stopped.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from .harness import LocalRuntime
from .jobs import cce_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

ROUNDS = 24
SEED = 4


def _faults(view: dict[str, Any]) -> int:
    return sum(1 for entry in view["status"]["history"] if entry["kind"] == "fault")


def _no_duplicates(local: LocalRuntime) -> None:
    duplicates = {name: len(procs) for name, procs in local.pod_processes().items() if len(procs) > 1}
    assert not duplicates, f"pods running twice: {duplicates}"


def _running(view: dict[str, Any], name: str) -> bool:
    return any(p["name"] == name and p["phase"] == "Running" for p in view["status"]["pods"])


def test_the_control_plane_killed_at_random_moments_loses_and_duplicates_nothing(local: LocalRuntime) -> None:
    rng = random.Random(SEED)
    job = local.submit(cce_job())
    local.wait_running(job, 4)
    expected = {"launcher": 0, "trainer": 0}
    trainers = 3
    seen_counts = dict(expected)
    seen_faults = 0
    kills = 0

    for round_ in range(ROUNDS):
        # Faults go to pods no scale-in removes; wait until the previous ones are decided, so that each
        # injected fault meets a pod the controller knows to be running (one fault, one restart).
        local.wait(
            job, lambda v: v["status"]["restartCounts"] == expected, what=f"round {round_}: counts {expected}"
        )
        action = rng.choice(["kill-trainer", "force-delete", "launcher-129", "scale", "scale"])
        if action == "scale":
            trainers = rng.choice([n for n in range(1, 6) if n != trainers])
            assert local.cli("scale", job, "--role", "trainer", "--replicas", str(trainers)).code == 0
        else:
            target = "cce-launcher-0" if action == "launcher-129" else "cce-trainer-0"
            local.wait(job, lambda v, t=target: _running(v, t), what=f"{target} running")
            argv = {
                "kill-trainer": ["kill", target, "--signal", "KILL"],
                "force-delete": ["force-delete", target],
                "launcher-129": ["kill", target, "--exit-code", "129"],
            }[action]
            result = local.cli("chaos", *argv)
            assert result.code == 0, result.err
            expected["launcher" if action == "launcher-129" else "trainer"] += 1

        time.sleep(rng.uniform(0.0, 0.6))  # the random moment of the kill
        local.kill_control_plane()
        kills += 1
        _no_duplicates(local)

        view = local.view(job)  # any command brings the control plane back
        counts = view["status"]["restartCounts"]
        assert all(counts[role] >= seen_counts[role] for role in counts), (seen_counts, counts)
        assert _faults(view) >= seen_faults
        seen_counts, seen_faults = counts, _faults(view)

    assert kills >= 20

    def settled(view: dict[str, Any]) -> bool:
        running = [p for p in view["status"]["pods"] if p["role"] == "trainer" and p["phase"] == "Running"]
        return (
            view["status"]["restartCounts"] == expected
            and len(running) == trainers
            and _running(view, "cce-launcher-0")
        )

    view = local.wait(job, settled, timeout=60, what=f"{trainers} trainers running, counts {expected}")
    assert _faults(view) == sum(expected.values())
    assert view["status"]["replicas"]["trainer"] == trainers
    _no_duplicates(local)
    wanted = {p["name"] for p in view["status"]["pods"] if p["phase"] == "Running"}
    local.wait(job, lambda _: set(local.pod_processes()) == wanted, what=f"exactly the processes of {wanted}")

    assert local.cli("chaos", "kill", "cce-launcher-0", "--exit-code", "0").code == 0
    view = local.wait_phase(job, "Succeeded")
    assert view["status"]["restartCounts"] == expected


def test_a_delete_interrupted_by_a_kill_9_is_finished_by_the_next_control_plane(local: LocalRuntime) -> None:
    job = local.submit(cce_job())
    local.wait_running(job, 4)
    assert local.cli("delete", job, "--no-wait").code == 0
    local.kill_control_plane()
    deadline = time.monotonic() + 30
    while local.call("exists", job=job):  # the next command's control plane carries on
        assert time.monotonic() < deadline, "the deleted job is still there"
        time.sleep(0.1)
    assert local.pod_processes() == {}
