"""The commands in the docs run, as shown, so the pages cannot rot.

Each page's ```console blocks are run in order, in a fresh directory with its own TRAINGUARD_HOME: a line
``$ CMD`` is a command (run by bash, with this virtualenv's ``trainguard`` and ``python3`` on PATH), and the
lines after it, up to the next ``$ ``, are its output. Every command must exit 0. Output is compared with
runs of spaces collapsed, and ``...`` stands for any text (a whole line of ``...``: any lines). A command
that only looks (get, describe, logs, events, metrics, plot) is run again until its output matches, within a
deadline: the runtime is eventually consistent, as a reader who runs it twice finds out. Files the commands
need are the page's ```yaml blocks whose first line is a comment naming the file (``# hello.yaml``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from trainguard.backends.local.client import Client, ClientError, control_plane_pid
from trainguard.backends.local.home import ENV_HOME, Home

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: The pages whose commands this test keeps true.
PAGES = ("quickstart.md", "metrics.md")
#: Verbs that change nothing: run again until their output matches.
LOOKING = frozenset({"get", "describe", "logs", "events", "metrics", "plot"})
#: How long a looking command may take to show what the page says.
SETTLE_SECONDS = 45.0
#: A reader's pace: the quickstart's job must still run when a reader who stops for a minute before each
#: step reaches the kill, and the get after it. So the test takes those steps a minute apart (a reader who
#: pauses after them only finds the job further along: the steps after it look at what happened), and waits
#: for the job's end as long as the page says the job runs.
READER_PAUSE = {"quickstart.md": 60.0}
#: ... from the step that submits the job to the first one after the fault.
_PACED_FROM = "trainguard run"
_PACED_UNTIL = "trainguard chaos"
#: The longest a page's job runs: how long a looking command may wait for the job's end.
JOB_SECONDS = {"quickstart.md": 330.0}
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
#: A line of a job's progress ("[hello-worker-1] step 12"), left out of what a failure shows.
_PROGRESS = re.compile(r"\bstep \d+$")
_FILE = re.compile(r"#\s*([\w.-]+\.ya?ml)\b")


@dataclass(frozen=True)
class Step:
    command: str
    expected: str

    @property
    def looking(self) -> bool:
        words = shlex.split(self.command.split("|")[0])
        words = [w for w in words if "=" not in w or w.startswith("-")]  # VAR=value prefixes
        return len(words) > 1 and words[0] == "trainguard" and words[1] in LOOKING


def blocks(page: str, kind: str) -> list[str]:
    return [body for found, body in _BLOCK.findall((DOCS / page).read_text()) if found == kind]


def steps(page: str) -> list[Step]:
    found = []
    for block in blocks(page, "console"):
        for chunk in ("\n" + block).split("\n$ ")[1:]:
            command, _, output = chunk.partition("\n")
            found.append(Step(command.strip(), output))
    return found


def files(page: str) -> dict[str, str]:
    named = {}
    for block in blocks(page, "yaml"):
        first = block.splitlines()[0] if block.strip() else ""
        match = _FILE.match(first)
        if match:
            named[match.group(1)] = block
    return named


def matches(expected: str, actual: str) -> bool:
    def squeeze(text: str) -> str:
        return "\n".join(re.sub(r"[ \t]+", " ", line).strip() for line in text.strip().splitlines())

    parts = [re.escape(part) for part in squeeze(expected).split("...")]
    return re.fullmatch(".*?".join(parts), squeeze(actual), re.DOTALL) is not None


@pytest.mark.parametrize("page", PAGES)
def test_the_page_has_commands(page: str) -> None:
    assert len(steps(page)) >= 5
    assert all(step.command.startswith(("trainguard", "TRAINGUARD_")) for step in steps(page))


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.timeout(900)
def test_the_commands_of_the_page_run_as_shown(page: str, tmp_path: Path) -> None:
    for name, text in files(page).items():
        (tmp_path / name).write_text(text)
    home = Home(tmp_path / "home")
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        ENV_HOME: str(home.root),
        "TRAINGUARD_IDLE_EXIT": "120",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "COLUMNS": "200",
    }
    env.pop("TRAINGUARD_METRICS_PORT", None)
    pause, settle = READER_PAUSE.get(page, 0.0), max(SETTLE_SECONDS, JOB_SECONDS.get(page, 0.0))
    commands = steps(page)
    paced = _paced(commands) if pause else range(0)
    try:
        for index, step in enumerate(commands):
            if index in paced:
                time.sleep(pause)  # a reader's pace, not a wait for something: the page must allow it
            _run(step, tmp_path, env, settle)
    finally:
        _stop(home)


def _paced(commands: list[Step]) -> range:
    """The steps a reader takes a minute apart: each after the job's submission up to the first after its
    fault."""
    submitted = next(i for i, step in enumerate(commands) if step.command.startswith(_PACED_FROM))
    fault = next(
        i for i, step in enumerate(commands) if i > submitted and step.command.startswith(_PACED_UNTIL)
    )
    return range(submitted + 1, fault + 2)


def _run(step: Step, cwd: Path, env: dict[str, str], settle: float = SETTLE_SECONDS) -> None:
    deadline = time.monotonic() + (settle if step.looking else 0)
    while True:
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", step.command],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode == 0 and matches(step.expected, done.stdout):
            return
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"$ {step.command}\nexit {done.returncode}\n--- expected\n{step.expected}--- got\n"
                f"{done.stdout}{done.stderr}{_what_happened(step, cwd, env)}"
            )
        time.sleep(0.5)


def _what_happened(step: Step, cwd: Path, env: dict[str, str]) -> str:
    """For a failed look at a job: its description and each pod's last lines of output, so that a failure
    on another machine says why."""
    words = shlex.split(step.command.split("|")[0])
    if len(words) < 3 or words[:2] != ["trainguard", "get"]:
        return ""
    said = []
    for command in (["trainguard", "describe", words[2]], ["trainguard", "logs", words[2]]):
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
            text = [line for line in (done.stdout + done.stderr).splitlines() if not _PROGRESS.search(line)]
            said.append(
                f"--- $ {' '.join(command)} (its last 80 lines but progress)\n" + "\n".join(text[-80:])
            )
    return "\n" + "\n".join(said)


def _stop(home: Home) -> None:
    """Shut the page's control plane down with its pods; nothing of the home may be left running."""
    pid = control_plane_pid(home)
    if pid is None:
        return
    with contextlib.suppress(ClientError, OSError), Client(home, start=False) as client:
        client.call("shutdown", stop_pods=True)
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait(timeout=15)


def test_ellipsis_matching() -> None:
    assert matches("job hello: Running (...) - worker 2/2\n", "job hello: Running (4s) - worker 2/2\n")
    assert matches("a\n...\nz\n", "a\nb\nc\nz\n")
    assert matches("POD   ROLE\n", "POD ROLE\n")
    assert not matches("restarts worker=1\n", "restarts worker=0\n")
    assert not matches("a\n", "a\nb\n")
