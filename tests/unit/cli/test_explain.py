"""``trainguard explain``: the policy's decision for one fault, as text and as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.unit.policy.jobs import CCE_JOB
from trainguard.cli.main import main

CCE_FILE = str(CCE_JOB)
KEYS = {"action", "scope", "rule", "counted", "reason"}


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert main(["explain", *args, "-o", "json"]) == 0
    out = capsys.readouterr().out
    answer = json.loads(out)
    assert set(answer) == KEYS
    return answer


@pytest.mark.parametrize(
    ("args", "action", "scope", "rule", "counted"),
    [
        (["--role", "launcher", "--exit-code", "129"], "restart", "Pod", "faultTolerantPolicy[0]", True),
        (["--role", "launcher", "--exit-code", "101"], "restart", "Pod", "faultTolerantPolicy[0]", True),
        (["--role", "launcher", "--exit-code", "1"], "fail-job", None, "restartPolicy", False),
        (["--role", "launcher", "--exit-code", "137"], "restart", "Pod", "restartPolicy", True),
        (["--role", "launcher", "--exit-code", "0"], "none", None, "restartPolicy", False),
        (["--role", "launcher", "--event", "nodeNotReady"], "restart", "Pod", "faultTolerantPolicy[1]", True),
        (["--role", "trainer", "--event", "nodeNotReady"], "restart", "Pod", "faultTolerantPolicy[0]", True),
        (
            ["--role", "trainer", "--event", "PodForceDeleted"],
            "restart",
            "Pod",
            "faultTolerantPolicy[0]",
            True,
        ),
        (["--role", "trainer", "--event", "podevicted"], "restart", "Pod", "restartPolicy", False),
        (["--role", "trainer", "--event", "OOMKilled"], "restart", "Pod", "restartPolicy", True),
        (["--role", "trainer", "--event", "StartTimeout"], "restart", "Pod", "restartTimeLimit", True),
        # The fault tolerance check's own rule (on: CCE's roles restart on faults): issued again, uncounted.
        (["--role", "trainer", "--event", "HardwareFault"], "restart", "Pod", "faultCheck", False),
        (["--role", "launcher", "--event", "PreCheckFailed"], "restart", "Pod", "faultCheck", False),
        (["--role", "trainer", "--hang"], "restart", "Pod", "restartPolicy", True),
        (["--role", "trainer", "--index", "2", "--exit-code", "1"], "shrink", None, "restartPolicy", False),
        (["--role", "Trainer", "--exit-code", "2", "--index", "4"], "shrink", None, "restartPolicy", False),
    ],
)
def test_the_cce_example(
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    action: str,
    scope: str | None,
    rule: str,
    counted: bool,
) -> None:
    answer = explain(capsys, CCE_FILE, *args)
    assert (answer["action"], answer["scope"], answer["rule"], answer["counted"]) == (
        action,
        scope,
        rule,
        counted,
    )
    assert isinstance(answer["reason"], str)
    assert answer["reason"]


@pytest.mark.parametrize(("restarts", "action"), [(99, "restart"), (100, "fail-job")])
def test_restarts_spent(capsys: pytest.CaptureFixture[str], restarts: int, action: str) -> None:
    answer = explain(
        capsys, CCE_FILE, "--role", "launcher", "--exit-code", "129", "--restarts", str(restarts)
    )
    assert answer["action"] == action
    if action == "fail-job":
        assert "restartLimit 100 of role launcher is spent" in str(answer["reason"])


def test_the_overlay_turns_hang_handling_on(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    overlay = tmp_path / "overlay.json"
    overlay.write_text(
        json.dumps({"kind": "job", "metadata": {"annotations": {"fault-tolerance/hang-retry": "true"}}})
    )
    answer = explain(capsys, CCE_FILE, "--overlay", str(overlay), "--role", "trainer", "--hang")
    assert (answer["action"], answer["rule"], answer["counted"]) == ("restart-in-place", "hang", False)
    answer = explain(
        capsys, CCE_FILE, "--overlay", str(overlay), "--role", "launcher", "--hang", "--hangs", "3"
    )
    assert (answer["action"], answer["rule"]) == ("fail-job", "hang")


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", CCE_FILE, "--role", "launcher", "--exit-code", "1"]) == 0
    out = capsys.readouterr().out
    assert "action:   fail-job" in out
    assert "scope:    -" in out
    assert "rule:     restartPolicy (OnNodeFailWithExitCode)" in out
    assert "counted:  no" in out
    assert "failPolicy Any" in out


def test_unknown_role_lists_the_roles(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", CCE_FILE, "--role", "worker", "--hang"]) == 2
    err = capsys.readouterr().err
    assert "no role 'worker'; its roles: launcher, trainer" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--role", "trainer", "--index", "5", "--hang"], "--index 5 is not one of them"),
        (["--role", "trainer", "--exit-code", "256"], "exit codes are 0-255"),
        (["--role", "trainer", "--exit-code", "x"], "not a whole number"),
        (["--role", "trainer", "--event", "reboot"], "'reboot' is not an event"),
        (["--role", "trainer", "--hang", "--exit-code", "1"], "not allowed with"),
        (["--role", "trainer"], "one of the arguments"),
        (["--role", "trainer", "--hang", "--restarts", "-1"], "negative"),
    ],
)
def test_bad_arguments(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert main(["explain", CCE_FILE, *args]) == 2
    assert message in capsys.readouterr().err


def test_a_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["explain", str(tmp_path / "none.yaml"), "--role", "a", "--hang"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_file_with_several_jobs_needs_job(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cce = yaml.safe_load(Path(CCE_FILE).read_text())
    other = {**cce, "metadata": {**cce["metadata"], "name": "other"}}
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump_all([cce, other]))
    assert main(["explain", str(path), "--role", "launcher", "--hang"]) == 2
    assert "choose one with --job NAME" in capsys.readouterr().err
    answer = explain(capsys, str(path), "--job", "other", "--role", "launcher", "--exit-code", "129")
    assert answer["action"] == "restart"


def test_kubeflow_exit_code(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "torch"}]}}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "kf"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "ExitCode", "template": template},
                "Worker": {"replicas": 2, "restartPolicy": "ExitCode", "template": template},
            }
        },
    }
    path = tmp_path / "kf.yaml"
    path.write_text(yaml.safe_dump(job))
    assert explain(capsys, str(path), "--role", "Worker", "--exit-code", "137")["action"] == "restart"
    assert explain(capsys, str(path), "--role", "Worker", "--exit-code", "1")["action"] == "fail-job"
