"""``trainguard plot --from-json``: a real PNG of sensible size, the data behind it, and clean errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.observability.scenario import JOB, bad_night
from trainguard.cli.main import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk, which a valid PNG has first."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.fixture(scope="module")
def status_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plot") / "job.json"
    path.write_text(json.dumps({"metadata": {"name": JOB}, "status": bad_night().status.to_dict()}))
    return path


def test_a_png_of_the_bad_night_with_its_data(
    status_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    picture, data = tmp_path / "timeline.png", tmp_path / "timeline.json"
    code = main(["plot", "--from-json", str(status_file), "-o", str(picture), "--data", str(data)])
    assert code == 0
    assert capsys.readouterr().out == f"wrote {picture} (6 pods, 3 faults, 2 scaling steps, 10 s)\n"
    # 12 x (1.6 + 0.45 per row) inches at 100 dpi: 6 pods and the job's phases.
    assert png_size(picture) == (1200, 475)
    assert 20_000 < picture.stat().st_size < 1_000_000
    plotted = json.loads(data.read_text())
    assert [f["fault"] for f in plotted["faults"]] == ["Exited", "Hang", "PodForceDeleted"]
    assert [s["operation"] for s in plotted["scale_steps"]] == ["scaleout", "scalein"]
    assert len(plotted["lanes"]) == 6


def test_a_bare_status_and_other_formats(status_file: Path, tmp_path: Path) -> None:
    bare = tmp_path / "status.json"
    bare.write_text(json.dumps({"job": JOB, **json.loads(status_file.read_text())["status"]}))
    svg = tmp_path / "timeline.svg"
    assert main(["plot", "--from-json", str(bare), "-o", str(svg)]) == 0
    assert svg.read_text().lstrip().startswith("<?xml")


def test_a_job_that_has_not_started_is_an_empty_picture(tmp_path: Path) -> None:
    status = tmp_path / "new.json"
    status.write_text('{"phase": "Pending", "history": []}')
    picture = tmp_path / "new.png"
    assert main(["plot", "--from-json", str(status), "-o", str(picture)]) == 0
    assert png_size(picture) == (1200, 205)


@pytest.mark.parametrize(
    ("content", "argv", "message"),
    [
        (None, ["--from-json", "{missing}", "-o", "t.png"], "No such file"),
        ("not json: [", ["--from-json", "{file}", "-o", "t.png"], "not a JSON object"),
        ('{"kind": "List", "items": []}', ["--from-json", "{file}", "-o", "t.png"], "not a job status"),
        (
            '{"phase": "Running", "history": [{"at": "x"}]}',
            ["--from-json", "{file}", "-o", "t.png"],
            "not a job status",
        ),
        ("{}", ["--from-json", "{file}", "-o", "t.gif"], "must end in .png, .svg, .pdf"),
        ("{}", ["JOB", "--from-json", "{file}", "-o", "t.png"], "give either JOB or --from-json"),
        ("{}", ["-o", "t.png"], "give either JOB or --from-json"),
    ],
)
def test_bad_input_is_one_clear_error(
    content: str | None,
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "in.json"
    if content is not None:
        file.write_text(content)
    args = [a.format(file=file, missing=tmp_path / "missing.json") for a in argv]
    assert main(["plot", *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1
    assert not (tmp_path / "t.png").exists()
