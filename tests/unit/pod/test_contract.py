"""The pod contract holds: every environment name and live store key is spelled in one file under src/.

What a pod and the control plane must agree on is written once (``trainguard.pod.contract``, and the host's own
settings in the one module that reads each); a second spelling is a name that can drift, so this test reads
every string constant of the source (f-strings' fixed parts too) and fails naming the files that spell one
twice.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
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
    member = contract.member_id(pid=41, host="node-a")
    assert member == "node-a:41"
    assert contract.member_host_pid(member) == ("node-a", "41")
    assert keys.gone(member) == "trainguard/live/uid-7/gone/node-a:41"
    assert keys.arrival(3, 1) == "trainguard/live/uid-7/r3/m1"
    assert keys.latest() == "trainguard/live/uid-7/latest"
