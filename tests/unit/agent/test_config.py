"""The agent's settings: options win over the environment, and every bad value gets one clear message."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from trainguard.agent import options
from trainguard.agent.config import AgentConfig, parse_signals
from trainguard.pod.hangsignal import HangSignal


def test_defaults_only_supervise() -> None:
    config = AgentConfig.resolve(["python", "train.py"], env={})
    assert config.command == ("python", "train.py")
    assert config.hang_timeout is None
    assert config.max_consecutive == 3
    assert config.signals == frozenset(HangSignal) - {HangSignal.IO}
    assert config.grace == 10.0
    assert config.report_file is None


def test_environment_configures_what_options_do_not() -> None:
    env = {
        "TRAINGUARD_HANG_TIMEOUT": "90",
        "TRAINGUARD_HANG_MAX_CONSECUTIVE": "5",
        "TRAINGUARD_HANG_SIGNALS": "log, cpu",
        "TRAINGUARD_HANG_GRACE": "2.5",
        "TRAINGUARD_REPORT_FILE": "/tmp/report.jsonl",
        "TRAINGUARD_TERMINATION_LOG": "/tmp/termination",
    }
    config = AgentConfig.resolve(["x"], hang_timeout="30", env=env)
    assert config.hang_timeout == 30.0
    assert config.max_consecutive == 5
    assert config.signals == {HangSignal.LOG, HangSignal.CPU}
    assert config.grace == 2.5
    assert config.report_file == Path("/tmp/report.jsonl")
    assert config.termination_log == Path("/tmp/termination")


def test_an_empty_variable_counts_as_unset() -> None:
    assert AgentConfig.resolve(["x"], env={"TRAINGUARD_HANG_TIMEOUT": " "}).hang_timeout is None


@pytest.mark.parametrize(
    ("options", "env", "message"),
    [
        ({"hang_timeout": "0"}, {}, "--hang-timeout: expected a positive number"),
        ({"hang_timeout": "soon"}, {}, "--hang-timeout: expected a positive number"),
        ({"hang_timeout": "nan"}, {}, "--hang-timeout"),
        ({}, {"TRAINGUARD_HANG_TIMEOUT": "-5"}, "TRAINGUARD_HANG_TIMEOUT=-5: expected a positive number"),
        ({"grace": "-1"}, {}, "--grace: expected a non-negative number"),
        ({"max_consecutive": "1.5"}, {}, "--max-consecutive: expected a whole number"),
        ({}, {"TRAINGUARD_HANG_MAX_CONSECUTIVE": "-1"}, "TRAINGUARD_HANG_MAX_CONSECUTIVE=-1"),
        ({"signals": "heartbeat,gpu"}, {}, "--signals: 'gpu' is not a hang signal"),
        ({"signals": ","}, {}, "--signals: name at least one signal"),
    ],
)
def test_bad_values_name_the_source_and_the_fix(
    options: dict[str, str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        AgentConfig.resolve(["x"], env=env, **options)


def test_a_command_is_required() -> None:
    with pytest.raises(ValueError, match="after '--'"):
        AgentConfig.resolve([], env={})


def test_signals_are_case_insensitive() -> None:
    assert parse_signals("Heartbeat,LOG") == {HangSignal.HEARTBEAT, HangSignal.LOG}


@pytest.mark.parametrize(
    ("option", "env", "expected"),
    [(None, {}, False), (True, {}, True), (None, {"TRAINGUARD_HANG_REPORT_ONLY": "1"}, True)],
)
def test_report_only_from_the_option_or_the_environment(option, env, expected) -> None:
    assert AgentConfig.resolve(["true"], report_only=option, env=env).report_only is expected


@pytest.mark.parametrize(
    ("pairs", "carried"),
    [
        ([], {}),
        (["A=1"], {"A": "1"}),
        (["A=x=y", "B="], {"A": "x=y", "B": ""}),  # the value is everything after the first =
        (["A=1", "A=2"], {"A": "2"}),  # the last of a name wins
        (['TRAINGUARD_FAULT_CHECK={"gpus": 0}'], {"TRAINGUARD_FAULT_CHECK": '{"gpus": 0}'}),
    ],
)
def test_env_options_are_names_and_values(pairs: list[str], carried: dict[str, str]) -> None:
    assert options.carried(pairs) == carried


@pytest.mark.parametrize("pair", ["A", "=1", "1A=2", "A B=1", "-A=1"])
def test_a_bad_env_option_is_refused_by_name(pair: str) -> None:
    with pytest.raises(ValueError, match=f"--env {pair!r}: expected NAME=VALUE"):
        options.carried([pair])


def test_env_options_join_the_environment_under_what_it_has(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod's own variables win (as in its env); the rest configure the agent and reach the command."""
    monkeypatch.setenv("TRAINGUARD_SNAPSHOT_DIR", "/own")
    for name in ("TRAINGUARD_HANG_TIMEOUT", "TRAINGUARD_GENERATION"):
        monkeypatch.setenv(name, "")  # recorded, so that what the agent sets is undone after the test
        monkeypatch.delenv(name)
    parser = argparse.ArgumentParser()
    options.add_arguments(parser)
    args = parser.parse_args(
        [
            "--env=TRAINGUARD_SNAPSHOT_DIR=/ours",
            "--env=TRAINGUARD_GENERATION=3",
            "--env=TRAINGUARD_HANG_TIMEOUT=90",
            "--",
            "python",
            "train.py",
        ]
    )
    config = options.config_from_args(args)
    assert os.environ["TRAINGUARD_SNAPSHOT_DIR"] == "/own"
    assert os.environ["TRAINGUARD_GENERATION"] == "3"
    assert config.hang_timeout == 90.0
    assert config.command == ("python", "train.py")
