"""``trainguard validate``: one line per job, warnings on stderr, exit 2 with one message for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.unit.api.jobdata import CCE_JOB, EXAMPLES, OVERLAY, cce_job, native
from trainguard.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_one_line_per_job(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "validate", str(CCE_JOB), str(EXAMPLES / "pytorchjob-plain.yaml"))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "test-horovod-elastic (AITrainingJob): launcher 1 [1-1], trainer 3 [1-5]",
        "pytorch-simple (PyTorchJob): master 1 [1-1], worker 2 [2-2]",
    ]


def test_every_example_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    code, out, _ = run(capsys, "validate", *files, "--overlay", str(OVERLAY))
    assert code == 0
    assert len(out.splitlines()) == len(files)


def test_json_output_is_the_native_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", str(CCE_JOB), "-o", "json")
    assert code == 0
    job = json.loads(out)
    assert (job["apiVersion"], job["kind"]) == ("trainguard.io/v1", "TrainingJob")
    assert job["spec"]["replicaSpecs"]["trainer"]["maxReplicas"] == 5


def test_json_output_of_several_jobs_is_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "validate", str(CCE_JOB), str(EXAMPLES / "pytorchjob-elastic.yaml"), "-o", "json")
    listing = json.loads(out)
    assert (listing["kind"], len(listing["items"])) == ("List", 2)


def test_warnings_go_to_stderr(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = cce_job()
    data["spec"]["replicaSpecs"]["launcher"]["faultTolerantPolicy"][0]["exitCodes"] = "129,10001"
    path = tmp_path / "aitj.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, err = run(capsys, "validate", str(path))
    assert code == 0
    assert out.startswith("test-horovod-elastic (AITrainingJob)")
    assert err.startswith(f"warning: {path}:")
    assert 'exitCodes "129,10001": codes above 255 cannot occur' in err


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(yaml.safe_dump(native()).encode())))
    code, out, _ = run(capsys, "validate", "-")
    assert (code, out) == (0, "small (TrainingJob): worker 2 [1-3]\n")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "{path}: the file is empty: it holds no job"),
        (b"\x00\x01\x02binary", "{path}: this is binary data, not a YAML or JSON job file"),
        (b"a: [1\n", "{path}:2: not valid YAML"),
        (b"spec: 1\nspec: 2\n", '{path}:2: spec: duplicate key "spec"'),
        (b"apiVersion: v1\nkind: Pod\n", '{path}:1: apiVersion: "v1" "Pod" is not a job trainguard reads'),
        (
            yaml.safe_dump(
                {
                    **native(),
                    "metadata": {"name": "x", "annotations": {"fault-tolerance/job-retry-num": "200"}},
                }
            ).encode(),
            '{path}:5: metadata.annotations["fault-tolerance/job-retry-num"]: '
            'fault-tolerance/job-retry-num "200": must be 1-128',
        ),
    ],
)
def test_bad_input_is_one_message_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, expected: str
) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(content)
    code, out, err = run(capsys, "validate", str(path))
    assert (code, out) == (2, "")
    assert err.startswith("error: " + expected.format(path=path))
    assert len(err.splitlines()) == 1
    assert "Traceback" not in err


def test_files_that_cannot_be_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "validate", str(CCE_JOB), str(tmp_path / "missing.yaml"), str(tmp_path))
    assert (code, out) == (2, "")  # all or nothing: a listing with holes would mislead
    assert err.splitlines() == [
        "error:",
        f"{tmp_path / 'missing.yaml'}: no such file",
        f"{tmp_path}: is a directory; give a job file (YAML or JSON)",
    ]


def test_a_bad_overlay(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    overlay = tmp_path / "o.json"
    overlay.write_text(
        '{"kind": "job", "metadata": {"annotations": {"fault-tolerance/hang-retry": "maybe"}}}'
    )
    code, _, err = run(capsys, "validate", str(CCE_JOB), "--overlay", str(overlay))
    assert code == 2
    assert err == (
        f'error: {overlay}: metadata.annotations["fault-tolerance/hang-retry"]: '
        'fault-tolerance/hang-retry "maybe": must be "true" or "false"\n'
    )


def test_no_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "validate")
    assert code == 2
    assert "the following arguments are required: FILE" in err


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"trainguard.io/live-spares": "1"}, 'add the annotation trainguard.io/live: "true"'),
        (
            {"trainguard.io/live": "true", "trainguard.io/live-spares": "two"},
            "'two' is not a number of spare workers per pod; give a whole number from 0 to 8",
        ),
        (
            {"trainguard.io/live": "true", "trainguard.io/hang-timeout-seconds": "5"},
            "5 s is too short for live mode",
        ),
    ],
)
def test_what_a_backend_would_refuse_is_refused_by_validate_too_naming_the_file_and_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, annotations: dict[str, str], message: str
) -> None:
    document = yaml.safe_load((EXAMPLES / "pytorchjob-elastic.yaml").read_text())
    document["metadata"].setdefault("annotations", {}).update(annotations)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    code, out, err = run(capsys, "validate", str(path))
    assert (code, out) == (2, "")
    assert err.startswith(f"error: {path}: ")
    assert message in err
    assert "Traceback" not in err
