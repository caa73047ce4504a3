"""The agent run from its bundle alone, as in a stock image: ``python -I -S`` (no site-packages: no pydantic,
psutil, PyYAML or installed trainguard) with only the bundle on ``sys.path``; on this Python and, where there
is one here, on Python 3.8."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.bundle import write_bundle

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the agent runs on Linux"),
]


def _python38() -> str | None:
    """A Python 3.8 on this machine (pyenv's, or on PATH), or None."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [*sorted(glob.glob(f"{root}/versions/3.8*/bin/python3.8")), "/usr/bin/python3.8"]
    for candidate in candidates:
        try:
            out = subprocess.run(
                [candidate, "-I", "-S", "-c", "import sys; print(sys.version_info[:2] == (3, 8))"],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
        except OSError:
            continue
        if out.stdout.strip() == "True":
            return candidate
    return None


@pytest.fixture(scope="module", params=["this", "3.8"])
def python(request: pytest.FixtureRequest) -> str:
    if request.param == "this":
        return sys.executable
    found = _python38()
    if found is None:
        pytest.skip("no Python 3.8 on this machine")
    return found


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("bundle")
    write_bundle(dest)
    return dest


def _isolated(python: str, bundle: Path, code: str) -> list[str]:
    """``python -I -S -c CODE``, with the bundle first on its path and nothing else of ours or site-packages."""
    return [python, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(bundle)!r}); {code}"]


def _agent(python: str, bundle: Path) -> list[str]:
    return _isolated(
        python, bundle, 'import runpy; runpy.run_module("trainguard.agent", run_name="__main__")'
    )


IMPORTS = """
import importlib
for absent in ("pydantic", "psutil", "yaml", "torch"):
    try:
        importlib.import_module(absent)
    except ImportError:
        pass
    else:
        raise SystemExit("importable without site-packages: " + absent)
import trainguard, trainguard.agent, trainguard.agent.__main__, trainguard.pod.torchrun, trainguard.pod.rendezvous_store
import trainguard.sdk.heartbeat, trainguard.sdk.checkpoint, trainguard.sdk.sampler, trainguard.sdk.elasticity
assert callable(trainguard.heartbeat)
assert trainguard.__file__.startswith(sys.path[0]), trainguard.__file__
assert trainguard.__version__
outside = sorted(name for name in sys.modules if name.split(".")[0] in ("pydantic", "psutil", "yaml", "torch"))
assert not outside, outside
print("ok", sys.version_info[0], sys.version_info[1])
"""


def test_the_bundle_imports_without_site_packages(python: str, bundle: Path) -> None:
    result = subprocess.run(_isolated(python, bundle, IMPORTS), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok 3 ")


def test_the_exit_status_of_the_command_is_the_agents(start_agent, python: str, bundle: Path) -> None:
    run = start_agent(["--grace", "1"], ["exit", "3"], entry=_agent(python, bundle))
    assert run.wait_exit() == 3, run.describe()
    assert [event["event"] for event in run.events()] == ["started", "exited"]
    assert run.events("exited")[0]["exit_code"] == 3


@pytest.mark.parametrize("signals", ["heartbeat,log,cpu", "log,cpu"])
def test_a_command_that_prints_then_hangs_is_restarted_in_place(
    start_agent, python: str, bundle: Path, signals: str
) -> None:
    """Steps printed (and heartbeats written) then nothing: with heartbeats deciding, and with output and
    the tree's CPU time (read from /proc) deciding."""
    run = start_agent(
        ["--hang-timeout", "1", "--grace", "1", "--signals", signals],
        ["stuck", "--steps", "3"],
        entry=_agent(python, bundle),
    )
    run.wait_output(b"step 2")
    restart = run.wait_event("restart-in-place")
    assert restart["consecutive"] == 1
    hang = run.events("hang")[0]
    assert hang["signal"] in (("heartbeat",) if signals.startswith("heartbeat") else ("log", "cpu"))
    again = run.wait_event("started", count=2)
    assert again["attempt"] == 2
    assert again["command"] == run.events("started")[0]["command"]
    run.wait_marker("stuck")
    assert run.process.poll() is None


def test_fencing_ends_the_tree_from_the_bundle(
    start_agent, python: str, bundle: Path, tmp_path: Path
) -> None:
    """The lease (``trainguard.agent.lease``) on Python 3.8 too: renewed, the command runs; gone, it ends."""
    from agent_harness import LeaseOperator
    from test_agent_fencing import BOUND

    operator = LeaseOperator(200)
    try:
        token = tmp_path / "token"
        token.write_text("t\n")
        options = ["--lease-url", operator.url, "--fence-after", f"{BOUND:g}", "--report-token", str(token)]
        run = start_agent(options, ["say-then-exit", "0", "--seconds", "60"], entry=_agent(python, bundle))
        run.wait_event("started")
        operator.status = 410
        assert run.wait_exit() == 75, run.describe()
        assert run.events("exited")[0]["reason"] == "Fenced"
    finally:
        operator.stop()
