"""The pod contract holds: every environment name and live store key is spelled in one file under src/.

What a pod and the control plane must agree on is written once (``trainguard.pod.contract``, and the host's own
settings in the one module that reads each); a second spelling is a name that can drift, so this test reads
every string constant of the source (f-strings' fixed parts too) and fails naming the files that spell one
twice.
"""

from __future__ import annotations

import ast
import os
import re
import socket
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import trainguard
from trainguard.pod import contract

SOURCE = Path(trainguard.__file__).resolve().parent
#: Our own names, torchrun's (``PET_`` is Kubeflow's prefix for torchrun's options) and Horovod's.
PREFIXED = re.compile(r"^(TRAINGUARD|TRAININGJOB|PET|TORCHELASTIC|TORCH|HOROVOD)_[A-Z0-9_]+$")
#: torch's names that trainguard sets or reads.
TORCH_NAMES = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "NODE_RANK",
    }
)
#: The fixed parts of the live store's keys (``contract.LiveKeys``).
STORE_KEY_PARTS = re.compile(
    r"^(trainguard/live/|gone/|beat/|latest|/arrivals|/m|/closed|/pg/|/xfer/|/skeleton|/step)$"
)


def _constants(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
    return found


def _spellings(pattern: re.Pattern[str] | None, names: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SOURCE.rglob("*.py")):
        for value in _constants(path):
            if (pattern is not None and pattern.match(value)) or value in names:
                where[value].append(str(path.relative_to(SOURCE)))
    return where


def test_each_environment_name_is_spelled_in_one_file() -> None:
    where = _spellings(PREFIXED, TORCH_NAMES)
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert twice == {}
    assert len(where) > 50  # the scan does find them: every one of ours, torch's and torchrun's


def test_the_live_store_keys_are_spelled_in_the_contract_alone() -> None:
    where = _spellings(STORE_KEY_PARTS)
    assert {name: files for name, files in where.items() if files != ["pod/contract.py"]} == {}
    assert "gone/" in where


def test_the_launcher_and_the_sdk_name_the_same_keys() -> None:
    keys = contract.LiveKeys(contract.live_prefix("uid-7"))
    member = str(contract.Member("node-a", "4026531836", "job-worker-1#2", 41, 9001))
    assert member == "node-a:4026531836:job-worker-1#2:41:9001"
    assert contract.Member.parse(member) == contract.Member(
        "node-a", "4026531836", "job-worker-1#2", 41, 9001
    )
    assert keys.gone(member) == "trainguard/live/uid-7/gone/node-a:4026531836:job-worker-1#2:41:9001"
    assert keys.arrival(3, 1) == "trainguard/live/uid-7/r3/m1"
    assert keys.latest() == "trainguard/live/uid-7/latest"


def _env(pod: str, generation: int) -> dict[str, str]:
    return {contract.ENV_POD_NAME: pod, contract.ENV_GENERATION: str(generation)}


def test_a_member_is_one_process_of_one_pod_incarnation() -> None:
    """Pods on the host network share a host name: their members differ by the pod; a pod started again gets
    members of its own (its generation), never a dead one's name or gone mark; the launcher names its worker as
    the worker names itself."""
    here = contract.member_id()
    assert contract.member_id(os.getpid(), dict(os.environ)) == here
    a = contract.member_id(os.getpid(), _env("job-worker-0", 1))
    b = contract.member_id(os.getpid(), _env("job-worker-1", 1))
    again = contract.member_id(os.getpid(), _env("job-worker-0", 2))
    assert len({a, b, again}) == 3
    parsed = contract.Member.parse(a)
    assert parsed is not None
    assert (parsed.host, parsed.incarnation, parsed.pid) == (
        socket.gethostname(),
        "job-worker-0#1",
        os.getpid(),
    )
    assert parsed.start == contract.process_start(os.getpid())


def test_a_member_is_judged_ended_only_where_its_pid_means_the_same_process() -> None:
    me = contract.Member.parse(contract.member_id())
    assert me is not None
    assert not me.ended_here()  # this very process
    assert replace(me, start=me.start + 1).ended_here()  # its pid, used again by another process
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = contract.Member.parse(contract.member_id(child.pid))
    child.wait()
    assert dead is not None
    assert dead.ended_here()
    # Another pod's pid namespace, or another host: its pid means nothing here (its beats and gone mark say).
    assert not replace(dead, pidns="4026531999").ended_here()
    assert not replace(dead, host="another-node").ended_here()
    assert contract.Member.parse("node-a:41") is None  # what is no member
