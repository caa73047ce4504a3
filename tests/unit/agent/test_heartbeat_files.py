"""The heartbeat files, both sides of the contract: the SDK writes them, the agent reads them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trainguard
from trainguard.agent.heartbeats import HeartbeatReader
from trainguard.sdk.heartbeat import MIN_INTERVAL, Heartbeats


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"TRAINGUARD_HEARTBEAT_DIR": str(tmp_path), "RANK": "3"}


@pytest.fixture
def beats(clock: FakeClock, env: dict[str, str]) -> Heartbeats:
    return Heartbeats(clock=clock, env=env)


def read(path: Path) -> dict[str, object]:
    return json.loads(path.read_text())


def test_writes_the_contract_fields(beats: Heartbeats, tmp_path: Path) -> None:
    beats.beat(step=7, loss=0.25, lr=1)
    record = read(tmp_path / "rank-3.json")
    assert record["step"] == 7
    assert record["pid"] == os.getpid()
    assert record["rank"] == 3
    assert record["metrics"] == {"loss": 0.25, "lr": 1}
    assert isinstance(record["time"], float)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank-3.json"]  # no temporary file left


def test_rate_limited_but_a_call_after_a_gap_always_writes(
    beats: Heartbeats, clock: FakeClock, tmp_path: Path
) -> None:
    beats.beat(step=1)
    clock.now += MIN_INTERVAL / 2
    beats.beat(step=2)
    assert read(tmp_path / "rank-3.json")["step"] == 1
    clock.now += MIN_INTERVAL
    beats.beat(step=3)
    assert read(tmp_path / "rank-3.json")["step"] == 3


def test_rank_defaults_to_zero(clock: FakeClock, tmp_path: Path) -> None:
    Heartbeats(clock=clock, env={"TRAINGUARD_HEARTBEAT_DIR": str(tmp_path)}).beat(step=1)
    assert read(tmp_path / "rank-0.json")["rank"] == 0


def test_without_the_agent_it_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINGUARD_HEARTBEAT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    trainguard.heartbeat(step=1)
    assert list(tmp_path.iterdir()) == []


def test_never_raises_when_the_directory_is_gone(clock: FakeClock, tmp_path: Path) -> None:
    Heartbeats(clock=clock, env={"TRAINGUARD_HEARTBEAT_DIR": str(tmp_path / "gone")}).beat(step=1)
    assert not (tmp_path / "gone").exists()


def test_odd_metrics_become_floats_or_strings(beats: Heartbeats, tmp_path: Path) -> None:
    class Scalar:
        def __float__(self) -> float:
            return 0.5

    beats.beat(step=1, scalar=Scalar(), name=object, nothing=None)
    metrics = read(tmp_path / "rank-3.json")["metrics"]
    assert metrics == {"scalar": 0.5, "name": str(object), "nothing": None}


def test_the_top_level_heartbeat_writes_without_importing_torch(tmp_path: Path) -> None:
    probe = "import sys, trainguard; trainguard.heartbeat(step=1); print('torch' in sys.modules)"
    env = {**os.environ, "TRAINGUARD_HEARTBEAT_DIR": str(tmp_path), "RANK": "0"}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    )
    assert result.stdout.strip() == "False"
    assert read(tmp_path / "rank-0.json")["step"] == 1


def test_reader_sees_what_the_sdk_wrote(beats: Heartbeats, tmp_path: Path) -> None:
    reader = HeartbeatReader(tmp_path)
    assert reader.read() == {}
    beats.beat(step=4, loss=1.5)
    seen = reader.read()
    assert list(seen) == [3]
    assert seen[3].sample.step == 4
    assert seen[3].sample.pid == os.getpid()
    assert seen[3].metrics == {"loss": 1.5}


def test_reader_sees_a_rewrite(beats: Heartbeats, clock: FakeClock, tmp_path: Path) -> None:
    reader = HeartbeatReader(tmp_path)
    beats.beat(step=1)
    first = reader.read()[3].sample
    clock.now += MIN_INTERVAL
    beats.beat(step=2)
    assert reader.read()[3].sample != first


def test_reader_leaves_out_ranks_whose_writer_ended(tmp_path: Path) -> None:
    for rank, pid in ((0, 11), (1, 22)):
        (tmp_path / f"rank-{rank}.json").write_text(
            json.dumps({"step": 1, "time": 1.0, "pid": pid, "rank": rank, "metrics": {}})
        )
    reader = HeartbeatReader(tmp_path, alive=lambda pid: pid == 11)
    assert list(reader.read()) == [0]


def test_reader_skips_broken_and_foreign_files(tmp_path: Path) -> None:
    (tmp_path / "rank-0.json").write_text("{not json")
    (tmp_path / "rank-1.json").write_text(json.dumps({"step": 1}))  # no time, no pid
    (tmp_path / "notes.txt").write_text("hello")
    assert HeartbeatReader(tmp_path).read() == {}


def test_clear_removes_the_previous_attempts_files(beats: Heartbeats, tmp_path: Path) -> None:
    beats.beat(step=1)
    reader = HeartbeatReader(tmp_path)
    reader.clear()
    assert reader.read() == {}
    assert list(tmp_path.iterdir()) == []
