"""``trainguard convert``: the native TrainingJob, in YAML or JSON, that loads back as the same job."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.unit.api.jobdata import CCE_JOB, EXAMPLES, OVERLAY
from trainguard.api.load import load_bytes, load_jobs
from trainguard.cli.main import main


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
@pytest.mark.parametrize("output", ["yaml", "json"])
def test_convert_every_example(capsys: pytest.CaptureFixture[str], name: str, output: str) -> None:
    assert main(["convert", str(EXAMPLES / name), "-o", output]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    (document,) = list(yaml.safe_load_all(out)) if output == "yaml" else [json.loads(out)]
    assert (document["apiVersion"], document["kind"]) == ("trainguard.io/v1", "TrainingJob")
    (again,) = load_bytes(out.encode(), f"converted.{output}")
    assert again.dialect == "TrainingJob"
    assert again.job == load_jobs(EXAMPLES / name)[0].job


def test_convert_with_an_overlay(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", str(CCE_JOB), "--overlay", str(OVERLAY), "-o", "json"]) == 0
    spec = json.loads(capsys.readouterr().out)["spec"]
    assert spec["jobRetry"]["retryNum"] == 3
    assert spec["hang"]["enabled"] is True
    assert spec["hang"]["maxConsecutive"] == 3


def test_convert_writes_exceptional_events_as_cce_does(capsys: pytest.CaptureFixture[str]) -> None:
    main(["convert", str(CCE_JOB)])
    trainer = yaml.safe_load(capsys.readouterr().out)["spec"]["replicaSpecs"]["trainer"]
    assert trainer["faultTolerantPolicy"][0]["exceptionalEvent"] == "nodeNotReady,PodForceDeleted"


def test_convert_rejects_an_unknown_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", str(CCE_JOB), "-o", "xml"]) == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err
