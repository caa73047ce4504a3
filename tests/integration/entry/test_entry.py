"""``trainguard-entry`` (entry/), the static program that delivers the agent into a stock image: ``install``
copies the installation into the pod's volume, ``probe`` looks for python3 and says what it found, ``run``
probes (once per pod) and starts the agent with it, or, where there is none, tells the operator why and runs
the command as written; ``python`` runs a module of ours.

Real processes: the program built by scripts/build-entry, the agent's bundle written by
``python -m trainguard.bundle``, and a PATH of our making standing in for the image's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def entry_binary() -> Path:
    built = subprocess.run(
        [str(ROOT / "scripts" / "build-entry")], capture_output=True, text=True, timeout=600, check=False
    )
    assert built.returncode == 0, built.stderr
    return Path(built.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def image_root(entry_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the operator's image holds at /opt/trainguard: the entry program and the agent's bundle."""
    root = tmp_path_factory.mktemp("opt-trainguard")
    (root / "bin").mkdir()
    (root / "bin" / "trainguard-entry").write_bytes(entry_binary.read_bytes())
    (root / "bin" / "trainguard-entry").chmod(0o755)
    subprocess.run([sys.executable, "-m", "trainguard.bundle", str(root / "lib")], check=True, timeout=60)
    return root


@pytest.fixture
def pod(image_root: Path, tmp_path: Path) -> Path:
    """A pod's /trainguard, filled by ``install`` from the image's installation."""
    volume = tmp_path / "trainguard"
    volume.mkdir()
    done = subprocess.run(
        [str(image_root / "bin" / "trainguard-entry"), "install", str(volume)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return volume


def _path_with(tmp_path: Path, **programs: str) -> str:
    """A PATH of one directory holding ``sh`` and the named programs (name -> the file they link to)."""
    directory = tmp_path / "image-bin"
    directory.mkdir(exist_ok=True)
    for name, target in {"sh": "/bin/sh", **programs}.items():
        (directory / name).symlink_to(target)
    return str(directory)


Entry = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def entry(pod: Path, tmp_path: Path) -> Entry:
    def call(*args: str, path: str) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": path,
            "TRAINGUARD_MESSAGE_FILE": str(tmp_path / "termination-log"),
            "HOME": str(tmp_path),
        }
        return subprocess.run(
            [str(pod / "bin" / "trainguard-entry"), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    return call


def test_install_copies_the_program_and_the_agents_modules_keeping_modes(pod: Path, image_root: Path) -> None:
    assert os.access(pod / "bin" / "trainguard-entry", os.X_OK)
    copied = sorted(p.relative_to(pod) for p in (pod / "lib").rglob("*.py"))
    assert copied == sorted(p.relative_to(image_root) for p in (image_root / "lib").rglob("*.py"))
    assert Path("lib/trainguard/agent/__main__.py") in copied


def test_probe_finds_python3_and_says_so_in_the_termination_message(
    entry: Entry, pod: Path, tmp_path: Path
) -> None:
    done = entry("probe", path=_path_with(tmp_path, python3=sys.executable))
    assert done.returncode == 0, done.stderr
    found = json.loads((pod / "probe.json").read_text())
    assert found["usable"] is True
    assert found["python"].endswith("/python3")
    assert found["version"] == ".".join(map(str, sys.version_info[:3]))
    assert json.loads((tmp_path / "termination-log").read_text()) == found
    # An image with python3 and no "python" gets one, last on the command's PATH.
    assert (pod / "python" / "python").resolve() == Path(sys.executable).resolve()


def test_probe_without_python3_says_what_is_missing_and_still_succeeds(
    entry: Entry, pod: Path, tmp_path: Path
) -> None:
    done = entry("probe", path=_path_with(tmp_path))
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "termination-log").read_text())
    assert found["usable"] is False
    assert found["python"] == ""
    assert "the image has no python3" in found["reason"]
    assert "3.8 or later" in found["reason"]


def test_probe_refuses_a_python_older_than_3_8(entry: Entry, pod: Path, tmp_path: Path) -> None:
    old = tmp_path / "old-python3"
    old.write_text("#!/bin/sh\necho 3.6.9\n")
    old.chmod(0o755)
    done = entry("probe", path=_path_with(tmp_path, python3=str(old)))
    assert done.returncode == 0, done.stderr
    found = json.loads((pod / "probe.json").read_text())
    assert found["usable"] is False
    assert "is Python 3.6.9; trainguard's agent needs 3.8 or later" in found["reason"]


def test_run_starts_the_agent_with_the_images_python_around_the_command(
    entry: Entry, pod: Path, tmp_path: Path
) -> None:
    path = _path_with(tmp_path, python3=sys.executable)
    assert entry("probe", path=path).returncode == 0
    report = tmp_path / "report.jsonl"
    command = 'echo "PYTHONPATH=$PYTHONPATH"; exit 3'
    done = entry("run", "--report", str(report), "--", "sh", "-c", command, path=path)
    assert done.returncode == 3, done.stderr  # the command's exit, through the agent
    assert f"PYTHONPATH={pod / 'lib'}" in done.stdout
    events = [json.loads(line)["event"] for line in report.read_text().splitlines()]
    assert events[0] == "started"  # the agent ran: it reported the command's start, then its exit
    assert events[-1] == "exited"


def test_run_without_python3_runs_the_command_as_written(entry: Entry, pod: Path, tmp_path: Path) -> None:
    path = _path_with(tmp_path)
    assert entry("probe", path=path).returncode == 0
    done = entry("run", "--grace", "5", "--", "sh", "-c", "echo as-written; exit 4", path=path)
    assert done.returncode == 4
    assert done.stdout == "as-written\n"
    assert "running the command as written, without trainguard's agent" in done.stderr


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["run", "--grace", "5"], 2, "run needs -- and a command after it"),
        (["run", "--"], 2, "run needs -- and a command after it"),
        (["frobnicate"], 2, 'unknown command "frobnicate"'),
        (["install"], 2, "install takes one argument"),
        (["run", "--", "no-such-program-here"], 127, "no-such-program-here: not found on PATH"),
    ],
)
def test_bad_use_gets_a_clear_error_and_a_shells_exit_code(
    entry: Entry, tmp_path: Path, args: list[str], code: int, says: str
) -> None:
    done = entry(*args, path=_path_with(tmp_path))
    assert done.returncode == code
    assert says in done.stderr


def test_python_runs_our_modules_with_the_images_python(entry: Entry, pod: Path, tmp_path: Path) -> None:
    path = _path_with(tmp_path, python3=sys.executable)
    assert entry("probe", path=path).returncode == 0
    done = entry("python", "-c", "import trainguard.agent as a; print(a.__file__)", path=path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(pod / "lib" / "trainguard" / "agent" / "__init__.py")


def test_run_probes_by_itself_records_it_and_gives_python3_a_python(
    entry: Entry, pod: Path, tmp_path: Path
) -> None:
    """No init container probes first: the entry's run does, records it in the pod's volume for the next
    start, and an image with only python3 runs a command that says ``python``."""
    path = _path_with(tmp_path, python3=sys.executable)
    assert not (pod / "probe.json").exists()
    command = "python -c 'import sys; print(sys.version_info[0])'"
    done = entry("run", "--grace", "5", "--", "sh", "-c", command, path=path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"
    assert json.loads((pod / "probe.json").read_text())["usable"] is True
    assert (pod / "python" / "python").resolve() == Path(sys.executable).resolve()


@pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("mount")),
    reason="needs root, unshare, mount",
)
def test_run_from_a_read_only_installation_keeps_its_probe_in_the_temporary_directory(
    image_root: Path, tmp_path: Path
) -> None:
    """The agent as an image volume: the operator's image mounted read-only at /trainguard. The entry keeps its
    probe and the ``python`` it gives python3 in ``$TMPDIR/trainguard`` instead, and writes nothing where it lies."""
    before = sorted(p.relative_to(image_root) for p in image_root.rglob("*"))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    entry = image_root / "bin" / "trainguard-entry"
    command = "python -c 'import sys; print(sys.version_info[0])'"
    # A mount namespace of its own, where the installation is bound read-only onto itself, as the kubelet mounts it.
    mount, unshare = shutil.which("mount"), shutil.which("unshare")
    script = (
        f"{mount} --bind {image_root} {image_root} && {mount} -o remount,bind,ro {image_root} && "
        f'exec {entry} run --grace 5 -- sh -c "{command}"'
    )
    env = {
        "PATH": _path_with(tmp_path, python3=sys.executable),
        "TMPDIR": str(temporary),
        "TRAINGUARD_MESSAGE_FILE": str(tmp_path / "termination-log"),
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        [str(unshare), "--mount", "--propagation", "private", "/bin/sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"
    assert json.loads((temporary / "trainguard" / "probe.json").read_text())["usable"] is True
    assert (temporary / "trainguard" / "python" / "python").resolve() == Path(sys.executable).resolve()
    assert sorted(p.relative_to(image_root) for p in image_root.rglob("*")) == before


def test_run_gives_the_command_the_agents_env_options_under_its_own(
    entry: Entry, pod: Path, tmp_path: Path
) -> None:
    path = _path_with(tmp_path, python3=sys.executable)
    command = 'echo "gen=$TRAINGUARD_GENERATION home=$HOME"'
    done = entry(
        "run",
        "--env=TRAINGUARD_GENERATION=4",
        f"--env=HOME=/not-{tmp_path}",
        "--",
        "sh",
        "-c",
        command,
        path=path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"gen=4 home={tmp_path}"  # HOME is the container's own: it wins


class _Operator:
    """The operator's agent-report endpoint, as far as the entry sees it: takes POSTs, answers ``status``."""

    def __init__(self, status: int) -> None:
        self.posts: list[tuple[str, dict[str, object]]] = []
        operator = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                operator.posts.append((self.headers["Authorization"], json.loads(body)))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/agent-report"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def operator() -> Iterator[Callable[[int], _Operator]]:
    started: list[_Operator] = []

    def start(status: int) -> _Operator:
        started.append(_Operator(status))
        return started[-1]

    yield start
    for each in started:
        each.server.shutdown()
        each.server.server_close()


def test_run_without_python3_tells_the_operator_and_the_termination_message_why(
    entry: Entry, tmp_path: Path, operator: Callable[[int], _Operator]
) -> None:
    endpoint = operator(204)
    token = tmp_path / "token"
    token.write_text("the-pods-token\n")
    options = ["--report-url", endpoint.url, f"--report-token={token}"]
    done = entry("run", *options, "--", "sh", "-c", "echo as-written", path=_path_with(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "as-written\n"
    ((authorization, body),) = endpoint.posts
    assert authorization == "Bearer the-pods-token"
    assert set(body) == {"report"}
    missing = body["report"]["agentMissing"]  # type: ignore[index]
    assert "the image has no python3" in missing
    message = json.loads((tmp_path / "termination-log").read_text())
    assert message["usable"] is False
    assert message["reason"] == missing


def test_an_operator_that_refuses_the_word_delays_the_command_by_seconds_only(
    entry: Entry, tmp_path: Path, operator: Callable[[int], _Operator]
) -> None:
    endpoint = operator(503)
    token = tmp_path / "token"
    token.write_text("t")
    options = ["--report-url", endpoint.url, "--report-token", str(token)]
    done = entry("run", *options, "--", "sh", "-c", "echo as-written", path=_path_with(tmp_path))
    assert done.returncode == 0
    assert done.stdout == "as-written\n"
    assert len(endpoint.posts) == 2  # tried twice, then the command runs
    assert "cannot tell the operator" in done.stderr
    assert "503 Service Unavailable" in done.stderr
