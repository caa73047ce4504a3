"""Memory snapshots in a real 3-rank gloo job under torchrun: each rank a node of its own (its own shared-memory
directory); a shard replicated to a buddy rank, a replicated state's copies being each other's. Restores from
memory, from a buddy's copy, and from a peer, with the restored state equal to the state saved."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

WORKER = Path(__file__).with_name("snapshot_worker.py")
STEPS = 7


def _torchrun(base: Path, *args: str, killed: bool = False) -> None:
    """Run the worker on 3 ranks; ``killed``: one rank SIGKILLs itself, so the run fails (and says why)."""
    logs = Path(tempfile.mkdtemp(prefix="ranks-", dir=base))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3",
               "--max-restarts=0", f"--log-dir={logs}", "--tee=3", str(WORKER), *args]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    # Each rank's own last words first (torchrun's summary says only how a rank ended, not why).
    ranks = sorted(logs.rglob("stderr.log"))
    said = "".join(f"\n--- {path.relative_to(logs)}:\n{path.read_text()[-1500:]}" for path in ranks)
    output = said + "\n--- torchrun:\n" + done.stdout[-2000:] + done.stderr[-2000:]
    if killed:
        assert done.returncode != 0, output
        assert "SIGKILL" in done.stdout + done.stderr, output
    else:
        assert done.returncode == 0, output


def _restored(base: Path) -> list[dict[str, object]]:
    return [json.loads((base / f"restored-{rank}.json").read_text()) for rank in range(3)]


def test_every_rank_resumes_from_its_own_memory(tmp_path: Path) -> None:
    _torchrun(tmp_path, "train", str(tmp_path), str(STEPS), "replicated")
    # A replicated state sends nothing: every rank's own copy is the others' replica.
    assert sorted(path.name.split("-")[0] for path in tmp_path.glob("node-*/*-*")) == ["own"] * 3
    _torchrun(tmp_path, "restore", str(tmp_path), "replicated")
    assert [(r["step"], r["source"], r["equal"]) for r in _restored(tmp_path)] == [
        (STEPS, "memory", True)
    ] * 3
    # Rank 1's own copy gone (its pod's memory, say): rank 0 sends it the step, to it alone.
    for own in (tmp_path / "node-1").glob("own-*"):
        shutil.rmtree(own)
    _torchrun(tmp_path, "restore", str(tmp_path), "replicated")
    restored = _restored(tmp_path)
    assert [(r["source"], r["equal"]) for r in restored] == [
        ("memory", True),
        ("peer", True),
        ("memory", True),
    ]
    assert restored[1]["fetches"] == [[0, 0, [1]]]


def test_a_shard_is_read_from_the_buddy_copy_on_its_node(tmp_path: Path) -> None:
    _torchrun(tmp_path, "train", str(tmp_path), str(STEPS), "sharded")
    # Each shard has a buddy copy on the next rank's node.
    assert (
        sorted(path.name.split("-")[0] for path in tmp_path.glob("node-*/*-*")) == ["buddy"] * 3 + ["own"] * 3
    )
    # Rank 1's own copy gone, and the copy its buddy (rank 2) holds on rank 1's node instead (as when rank 1's
    # replacement lands on the buddy's node): rank 1 reads its shard from there.
    for own in (tmp_path / "node-1").glob("own-*"):
        shutil.rmtree(own)
    (held,) = (tmp_path / "node-2").glob("buddy-*")  # rank 1's shard
    held.rename(tmp_path / "node-1" / held.name)
    _torchrun(tmp_path, "restore", str(tmp_path), "sharded")
    restored = _restored(tmp_path)
    assert [(r["step"], r["source"], r["equal"]) for r in restored] == [
        (STEPS, "memory", True),
        (STEPS, "buddy", True),
        (STEPS, "memory", True),
    ]
    assert all(not r["fetches"] for r in restored)


def test_a_lost_nodes_rank_gets_the_step_from_a_peer(tmp_path: Path) -> None:
    _torchrun(tmp_path, "train", str(tmp_path), str(STEPS), "replicated")
    shutil.rmtree(tmp_path / "node-1")  # the node and its memory are gone
    _torchrun(tmp_path, "restore", str(tmp_path), "replicated")
    restored = _restored(tmp_path)
    assert [(r["step"], r["equal"]) for r in restored] == [(STEPS, True)] * 3
    # Rank 1's new node has nothing (the buddy copy rank 0 had sent it went with the node): rank 0 sends it.
    assert [r["source"] for r in restored] == ["memory", "peer", "memory"]
    assert restored[1]["fetches"] == [[0, 0, [1]]]


def test_a_lost_nodes_shard_comes_back_from_its_buddy(tmp_path: Path) -> None:
    _torchrun(tmp_path, "train", str(tmp_path), str(STEPS), "sharded")
    shutil.rmtree(tmp_path / "node-1")  # rank 1's shard was replicated to its buddy, rank 2
    _torchrun(tmp_path, "restore", str(tmp_path), "sharded")
    restored = _restored(tmp_path)
    assert [(r["step"], r["equal"]) for r in restored] == [(STEPS, True)] * 3
    assert [r["source"] for r in restored] == ["memory", "peer", "memory"]
    assert restored[1]["fetches"] == [[1, 2, [1]]]  # shard 1, sent by rank 2 from its buddy copy


def test_in_place_a_rank_killed_inside_its_optimizer_step_gets_the_step_from_a_peer(tmp_path: Path) -> None:
    """Rank 1 SIGKILLs itself inside a real optimizer step, after its first parameter's update and before the
    others' (``snapshot_worker.KillInsideStep``): its memory holds half a step. It resumes with the step its
    peers saved, sent by one of them, never its own torn memory."""
    import torch

    _torchrun(tmp_path, "train", str(tmp_path), str(STEPS), "in-place", killed=True)
    killed = json.loads((tmp_path / "killed-1.json").read_text())
    # Killed between two parameter updates: the first parameter had changed, the others not yet.
    assert killed["parameter"] == 0
    assert killed["of"] > 1
    assert killed["before"] != killed["after"]
    saved = torch.load(tmp_path / "saved-1.pt")
    first = next(iter(saved["model"].values()))  # the first parameter, as rank 1 saved it at the last step
    assert killed["before"] == hashlib.sha256(first.contiguous().numpy().tobytes()).hexdigest()
    # Each rank's optimizer tensors are kept in its node's memory; the step pre-hook removed rank 1's snapshot
    # before the update: its region is there, with no snapshot.
    assert [len(list((tmp_path / f"node-{rank}").glob("own-*.live/slot-*.meta"))) for rank in range(3)] == [
        1,
        0,
        1,
    ]
    assert len(list((tmp_path / "node-1").glob("own-*.live/slot-*.data"))) == 1
    _torchrun(tmp_path, "restore", str(tmp_path), "in-place")
    restored = _restored(tmp_path)
    # Every rank trained on its own inputs: equal to rank 0's saved state only through DDP's averaging, which
    # went on after the parameters moved into shared memory. Rank 1 gets that state from rank 0.
    assert [(r["step"], r["source"], r["equal"]) for r in restored] == [
        (STEPS, "memory", True),
        (STEPS, "peer", True),
        (STEPS, "memory", True),
    ]
    assert restored[1]["fetches"] == [[0, 0, [1]]]
