"""The nudge file: its format, and which changes of it are a nudge (a new token, once, never the one at start)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainguard.agent.config import AgentConfig
from trainguard.agent.nudge import Nudge, NudgeWatch, parse_nudge


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("worker-1#3 1763826309.25", Nudge("worker-1#3", 1763826309.25)),
        ("  abc 12\n", Nudge("abc", 12.0)),
        ("abc 12\nignored second line", Nudge("abc", 12.0)),
        ("", None),
        ("\n", None),
        ("abc", None),
        ("abc soon", None),
        ("abc 12 13", None),
        ("abc nan", None),
        ("abc inf", None),
        ("abc -5", None),
        ("abc 0", None),
        ("\x00\xff garbage", None),
    ],
)
def test_parse_accepts_a_token_and_a_time_and_nothing_else(text: str, expected: Nudge | None) -> None:
    assert parse_nudge(text) == expected


def _write(path: Path, text: str, bump: int) -> None:
    path.write_text(text)
    # A distinct modification time, as a rewrite a moment later has (filesystem clocks can be coarse).
    stamp = 1_700_000_000_000_000_000 + bump * 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


def test_a_new_token_is_a_nudge_once(tmp_path: Path) -> None:
    path = tmp_path / "nudge"
    watch = NudgeWatch(path)
    assert watch.poll() is None  # no file: no nudge
    _write(path, "a 100.5", 1)
    assert watch.poll() == Nudge("a", 100.5)
    assert watch.poll() is None
    _write(path, "a 100.5", 2)  # the same failure written again (a kubelet refresh, a second reconcile)
    assert watch.poll() is None
    _write(path, "a 200", 3)  # the same token with another time is still the same failure
    assert watch.poll() is None
    _write(path, "b 300", 4)
    assert watch.poll() == Nudge("b", 300.0)


def test_the_token_present_at_start_is_old_news(tmp_path: Path) -> None:
    path = tmp_path / "nudge"
    _write(path, "old 100", 1)
    watch = NudgeWatch(path)
    assert watch.poll() is None
    _write(path, "old 100", 2)
    assert watch.poll() is None
    _write(path, "new 200", 3)
    assert watch.poll() == Nudge("new", 200.0)


@pytest.mark.parametrize("bad", ["", "garbled", "x y z"])
def test_an_empty_or_garbled_file_is_no_nudge_and_no_error(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "nudge"
    _write(path, bad, 1)
    watch = NudgeWatch(path)
    _write(path, bad + " ", 2)
    assert watch.poll() is None
    path.unlink()
    assert watch.poll() is None
    _write(path, "t 5", 3)
    assert watch.poll() == Nudge("t", 5.0)


def test_a_directory_in_its_place_is_no_nudge(tmp_path: Path) -> None:
    path = tmp_path / "nudge"
    path.mkdir()
    assert NudgeWatch(path).poll() is None


def test_the_option_wins_over_the_environment() -> None:
    env = {"TRAINGUARD_NUDGE_FILE": "/env/nudge"}
    assert AgentConfig.resolve(["x"], env=env).nudge_file == Path("/env/nudge")
    assert AgentConfig.resolve(["x"], nudge_file="/opt/nudge", env=env).nudge_file == Path("/opt/nudge")
    assert AgentConfig.resolve(["x"], env={}).nudge_file is None
