"""``trainguard.bundle``: the agent's closure is stdlib-only (torch only lazily, where allowed), a forbidden import
is refused by name, and the bundle on disk is exactly the closure, readable by Python 3.8."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard import bundle
from trainguard._version import __version__

FORBIDDEN = {"pydantic", "psutil", "yaml", "matplotlib", "prometheus_client", "kubernetes"}


def _imported_tops(path: Path) -> set[str]:
    """Every module a file imports, anywhere in it (functions and TYPE_CHECKING blocks included)."""
    tops = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            tops |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return tops


def test_the_closure_holds_the_entries_and_imports_nothing_but_the_standard_library() -> None:
    modules = bundle.closure()
    for required in [
        "trainguard",
        "trainguard._version",
        "trainguard.agent",
        "trainguard.agent.__main__",
        "trainguard.agent.proc",
        "trainguard.pod.hangsignal",
        "trainguard.pod.torchrun",
        "trainguard.pod.rendezvous_store",
        # Training scripts import the SDK from the bundle (first on their PYTHONPATH).
        "trainguard.sdk",
        "trainguard.sdk.heartbeat",
        "trainguard.sdk.checkpoint",
    ]:
        assert required in modules
    for outside in [
        "trainguard.api",
        "trainguard.cli",
        "trainguard.controller",
        "trainguard.bundle",
    ]:
        assert not any(name == outside or name.startswith(outside + ".") for name in modules)
    for name, path in modules.items():
        assert not _imported_tops(path) & FORBIDDEN, name
        if "torch" in _imported_tops(path):
            assert any(name == lazy or name.startswith(lazy + ".") for lazy in bundle.LAZY_TORCH), name


def _fake_package(root: Path, files: dict[str, str]) -> Path:
    """A package named trainguard under ``root`` with the given files (path -> source)."""
    base = {"__init__.py": "", "agent/__init__.py": "", "agent/__main__.py": "import trainguard.agent\n"}
    for relative, text in {**base, **files}.items():
        path = root / "trainguard" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "trainguard"


REFUSED = [
    # (files, what the one error names)
    ({"agent/tree.py": "import psutil\n", "agent/__init__.py": "from trainguard.agent import tree\n"},
     ["trainguard.agent.tree", "imported by trainguard.agent", "line 1: import psutil", "not in the standard library"]),
    ({"agent/__init__.py": "import os\nfrom pydantic import BaseModel\n"},
     ["trainguard.agent", "line 2: import pydantic"]),
    ({"agent/__init__.py": "def load():\n    import yaml\n"},
     ["trainguard.agent", "line 2: import yaml"]),
    ({"agent/__init__.py": "from trainguard.api import HangSignal\n", "api/__init__.py": "import pydantic.main\n"},
     ["trainguard.api (imported by trainguard.agent", "import pydantic.main"]),
    ({"agent/__init__.py": "def run():\n    import torch\n"},
     ["trainguard.agent", "import torch", "not in the standard library"]),
    ({"agent/__init__.py": "import trainguard.pod.torchrun\n", "pod/__init__.py": "", "pod/torchrun.py": "import torch.distributed\n"},
     ["trainguard.pod.torchrun", "import torch.distributed", "only inside functions"]),
    ({"agent/__init__.py": "import tomllib\n"},
     ["trainguard.agent", "import tomllib", "Python 3.8"]),
    ({"agent/__init__.py": "from trainguard.agent import nowhere\nimport trainguard.nope\n"},
     ["trainguard.agent", "imports trainguard.nope", "not a module"]),
]  # fmt: skip


@pytest.mark.parametrize(("files", "names"), REFUSED)
def test_a_module_beyond_the_standard_library_is_refused_by_name(
    tmp_path: Path, files: dict[str, str], names: list[str]
) -> None:
    source = _fake_package(tmp_path, files)
    with pytest.raises(bundle.BundleError) as caught:
        bundle.closure(["trainguard.agent.__main__"], source)
    message = str(caught.value)
    assert "\n" not in message
    for name in names:
        assert name in message


def test_what_the_closure_may_import(tmp_path: Path) -> None:
    source = _fake_package(
        tmp_path,
        {
            "agent/__init__.py": (
                "from __future__ import annotations\n"
                "import os.path\n"
                "from typing import TYPE_CHECKING\n"
                "from . import helper\n"
                "from .sub import thing\n"
                "if TYPE_CHECKING:\n"
                "    import pydantic\n"
                "    from trainguard.api import TrainingJob\n"
                "else:\n"
                "    import json\n"
            ),
            "agent/helper.py": "def later():\n    from trainguard.pod import torchrun\n",
            "agent/sub/__init__.py": "thing = 1\n",
            "pod/__init__.py": "",
            "pod/torchrun.py": "import sys\n\ndef main():\n    from torch.distributed import run\n",
        },
    )
    found = bundle.closure(["trainguard.agent.__main__"], source)
    assert list(found) == [
        "trainguard",
        "trainguard.agent",
        "trainguard.agent.__main__",
        "trainguard.agent.helper",
        "trainguard.agent.sub",
        "trainguard.pod",
        "trainguard.pod.torchrun",
    ]
    assert found["trainguard.agent.sub"] == source / "agent" / "sub" / "__init__.py"


def test_the_bundle_is_exactly_the_closure_and_names_it(tmp_path: Path) -> None:
    modules = bundle.write_bundle(tmp_path / "new" / "lib")
    root = tmp_path / "new" / "lib" / "trainguard"
    closure = bundle.closure()
    assert modules == list(closure)
    files = sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
    expected = sorted(str(path.relative_to(bundle._SOURCE)) for path in closure.values())
    assert files == sorted([*expected, "BUNDLE"])
    for path in closure.values():
        assert (root / path.relative_to(bundle._SOURCE)).read_bytes() == path.read_bytes()
    manifest = (root / "BUNDLE").read_text()
    assert __version__ in manifest
    assert ">= 3.8" in manifest
    assert all(f"  {module}\n" in manifest for module in modules)
    assert [path.name for path in (tmp_path / "new" / "lib").iterdir()] == ["trainguard"]  # no staging left

    # Written again: an earlier bundle is replaced, whatever it held.
    (root / "stale.py").write_text("")
    assert bundle.write_bundle(tmp_path / "new" / "lib") == modules
    assert not (root / "stale.py").exists()
    assert [path.name for path in (tmp_path / "new" / "lib").iterdir()] == ["trainguard"]


def _bad_dest_file(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("")
    return tmp_path / "file"


def _bad_dest_other_package(tmp_path: Path) -> Path:
    (tmp_path / "src" / "trainguard").mkdir(parents=True)
    (tmp_path / "src" / "trainguard" / "mine.py").write_text("")
    return tmp_path / "src"


def _bad_dest_under_a_file(tmp_path: Path) -> Path:
    return _bad_dest_file(tmp_path) / "lib"


@pytest.mark.parametrize(
    ("make_dest", "says"),
    [
        (_bad_dest_file, "is not a directory"),
        (_bad_dest_other_package, "exists and is not a trainguard bundle; not replacing it"),
        (_bad_dest_under_a_file, "cannot write into"),
    ],
)
def test_a_bad_dest_is_one_error_line(tmp_path: Path, make_dest, says: str) -> None:
    dest = make_dest(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "trainguard.bundle", str(dest)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: ")
    assert says in result.stderr
    if make_dest is _bad_dest_other_package:
        assert (dest / "trainguard" / "mine.py").exists()


def test_the_command_writes_the_bundle(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trainguard.bundle", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert f"{len(bundle.closure())} modules in {tmp_path / 'trainguard'}" in result.stdout
    assert (tmp_path / "trainguard" / "agent" / "__main__.py").is_file()


def test_every_file_of_the_bundle_runs_on_python_3_8(tmp_path: Path) -> None:
    vermin = shutil.which("vermin") or str(Path(sys.executable).with_name("vermin"))
    if not Path(vermin).exists():
        pytest.fail("vermin is not installed: pip install -e '.[dev]'")
    bundle.write_bundle(tmp_path)
    files = sorted(str(path) for path in (tmp_path / "trainguard").rglob("*.py"))
    assert len(files) == len(bundle.closure())
    # Annotations are never evaluated (``from __future__ import annotations``), so ``X | None`` there is fine.
    result = subprocess.run(
        [vermin, "--no-config-file", "--target=3.8-", "--violations", "--no-eval-annotations", "--no-tips",
         "--processes=1", *files],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
