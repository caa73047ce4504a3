"""``trainguard simulate``: the figures as text and JSON, the plots, and clear errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.policy.jobs import CCE_JOB
from trainguard.cli.main import main

SMALL = ["--gpus", "64", "--mtbf-hours", "200", "--days", "5"]
PNG = b"\x89PNG\r\n\x1a\n"


def simulate(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["simulate", *args, "-o", "json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one object
    data: dict[str, Any] = json.loads(out)
    return data


def test_json_has_goodput_time_lost_by_cause_and_restarts_by_scope(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = simulate(
        capsys, *SMALL, "--checkpoint-cost-s", "30", "--restart-cost-s", "120", "--interval-s", "900"
    )
    assert 0.5 < data["goodput"] < 1.0
    assert set(data["lost_by_cause"]) >= {
        "rework",
        "detection",
        "restart",
        "waiting_for_capacity",
        "checkpointing",
    }
    assert set(data["restarts"]) >= {"Pod", "Replica", "All"}
    assert data["interval_s"] == 900.0
    assert data["nodes"] == 8
    wall = data["wall_hours"] * 3600
    assert data["useful_hours"] * 3600 + sum(data["lost_by_cause"].values()) == pytest.approx(wall, rel=1e-4)
    assert data["theory"]["young_daly_interval_s"] == pytest.approx(
        (2 * 30 * 200 * 3600 / 8) ** 0.5, rel=1e-4
    )


def test_text_names_the_goodput_and_each_cause(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", *SMALL]) == 0
    out = capsys.readouterr().out
    for words in ("goodput", "rework since the last checkpoint", "detection", "waiting for capacity"):
        assert words in out
    assert "restarts by scope: Pod" in out


def test_a_job_file_is_sized_and_compared(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = simulate(capsys, str(CCE_JOB), *SMALL, "--compare", "--plot-dir", str(tmp_path))
    assert data["job"] == "test-horovod-elastic"
    policies = [row["policy"] for row in data["compare"]]
    assert policies[0] == "as written"
    assert {"Pod-scope restart", "All-scope restart", "elastic shrink-and-grow"} <= set(policies)
    assert all({"goodput", "lost_by_cause", "restarts"} <= set(row) for row in data["compare"])
    assert sorted(Path(path).name for path in data["plots"]) == [
        "goodput_vs_interval.png",
        "policies.png",
        "timeline.png",
    ]
    for path in data["plots"]:
        content = Path(path).read_bytes()
        assert content.startswith(PNG)
        assert len(content) > 10_000


def test_a_trace_replaces_drawn_failures(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("time,node,kind\n3600,node-3,crash\n7200,5,node\n1e9,0,hang\n")
    assert main(["simulate", *SMALL, "--trace", str(trace), "-o", "json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["interruptions"] == {"total": 2, "crash": 1, "node": 1}
    assert data["trace"] is True
    assert "1 failures after day 5 are left out" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "100"], "--gpus 100 is not a multiple of --gpus-per-node 8"),
        (
            ["--gpus", "1000000", "--gpus-per-node", "1"],
            "makes 1,000,000 worker pods (one per node); at most 100,000 pods per role",
        ),
        (["--days", "0"], "argument --days: 0 must be above 0"),
        (["--mtbf-hours", "soon"], "argument --mtbf-hours: 'soon' is not a number"),
        (["--checkpoint-cost-s", "-1"], "argument --checkpoint-cost-s: -1 must be 0 or more"),
        (["--failure-mix", "disk=1"], "'disk=1': write KIND=FRACTION"),
        (["--trace", "/nonexistent.csv"], "/nonexistent.csv: cannot read the trace"),
        (["/nonexistent.yaml"], "/nonexistent.yaml"),
    ],
)
def test_bad_input_is_one_clear_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["simulate", *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_a_bad_trace_line_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("60,0,crash\n120,99,crash\n")
    assert main(["simulate", *SMALL, "--trace", str(trace)]) == 2
    assert f"{trace}:2: node '99' is not one of the 9 GPU nodes" in capsys.readouterr().err
