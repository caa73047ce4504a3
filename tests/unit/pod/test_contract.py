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

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    member = contract.Member("digits-worker-1", 2, 41, 98765, "3fa9c01b22de4411").id
    assert member == "digits-worker-1/2/41/98765/3fa9c01b22de4411"
    assert keys.gone(member) == "trainguard/live/uid-7/gone/digits-worker-1/2/41/98765/3fa9c01b22de4411"
    assert keys.arrival(3, 1) == "trainguard/live/uid-7/r3/m1"
    assert keys.latest() == "trainguard/live/uid-7/latest"


@given(
    pod=st.text(min_size=1),
    generation=st.integers(min_value=0),
    pid=st.integers(min_value=0),
    started=st.integers(min_value=0),
    space=st.one_of(st.just(""), st.text(alphabet="0123456789abcdef", min_size=1, max_size=16)),
)
def test_a_members_id_gives_back_its_fields(
    pod: str, generation: int, pid: int, started: int, space: str
) -> None:
    member = contract.Member(pod, generation, pid, started, space)
    assert contract.Member.parse(member.id) == member


@pytest.mark.parametrize(
    "text",
    [
        "node-a:41",
        "",
        "pod/1/41/98765",
        "pod/1/41/98765/abc/extra",
        "pod/one/41/98765/abc",
        "/1/41/98765/abc",
    ],
)
def test_anything_else_is_not_a_members_id(text: str) -> None:
    with pytest.raises(ValueError, match="not a live member's id"):
        contract.Member.parse(text)


def test_a_launcher_names_its_worker_as_the_worker_names_itself() -> None:
    env = dict(os.environ, TRAININGJOB_POD_NAME="digits-worker-1", TRAINGUARD_GENERATION="3")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(SOURCE.parent), env.get("PYTHONPATH"))))
    code = "from trainguard.pod import contract; print(contract.member_id())"
    worker = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    named = contract.member_id(worker.pid, env)  # as the launcher does, before it reaps the worker
    itself, _ = worker.communicate(timeout=60)
    assert itself.strip() == named
    member = contract.Member.parse(named)
    assert (member.pod, member.generation, member.pid) == ("digits-worker-1", 3, worker.pid)
    assert member.started > 0
    assert member.space == contract.pid_space() != ""


def test_pods_that_share_a_host_name_and_a_restarted_pod_are_other_members() -> None:
    here = contract.Member.of(os.getpid(), {})
    assert here.pod == socket.gethostname()  # outside trainguard: the host name, incarnation 0
    a = contract.Member.of(
        os.getpid(), {"TRAININGJOB_POD_NAME": "job-worker-0", "TRAINGUARD_GENERATION": "1"}
    )
    b = contract.Member.of(
        os.getpid(), {"TRAININGJOB_POD_NAME": "job-worker-1", "TRAINGUARD_GENERATION": "1"}
    )
    again = contract.Member.of(
        os.getpid(), {"TRAININGJOB_POD_NAME": "job-worker-0", "TRAINGUARD_GENERATION": "2"}
    )
    assert len({here.id, a.id, b.id, again.id}) == 4
    # The same pod and pid in another pid namespace (a pod on the host network), or started later: others too.
    assert replace(a, space="0" * 16).id != a.id
    assert replace(a, started=a.started + 1).id != a.id
