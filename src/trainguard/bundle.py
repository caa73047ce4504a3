"""``python -m trainguard.bundle DEST``: the agent's modules as plain files, for images that have only python3.

The Kubernetes operator delivers its in-pod agent into users' own images (a PyTorch image, say, with torch but
nothing of trainguard, pydantic, psutil or PyYAML): an init container copies a directory of these files into
the pod, and the container runs ``python3 -m trainguard.agent [options] -- CMD`` with that directory on
``PYTHONPATH``. So the bundle holds exactly the import closure of its entry modules (``ENTRIES``: the agent,
``trainguard.pod.torchrun``, which imports torch from the image, lazily, and ``trainguard.pod.rendezvous_store``), with
the packages above them, and that closure may import nothing but the standard library of Python 3.8.

The closure is found by reading the sources (``ast``), not by importing them: every ``import`` of a
``trainguard`` module is followed, at any depth (inside functions too, but not under ``if TYPE_CHECKING:``),
and every other import must be of the standard library (``sys.stdlib_module_names``, less the modules newer
than Python 3.8). ``torch`` is allowed only where ``LAZY_TORCH`` says, and only inside functions. Anything
else is refused with an error naming the module, the line and the import, so a non-stdlib import added to
the closure fails the bundle (and its test) at once.

``DEST/trainguard/`` gets the ``.py`` files and ``BUNDLE``, a text file naming the version and the modules.
DEST is created if missing; an earlier bundle there is replaced, anything else named ``trainguard`` is not.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from trainguard._version import __version__

#: What pods run from the bundle: ``python -m`` each of these; and the SDK, which training scripts import (the
#: bundle is first on their ``PYTHONPATH``, so ``import trainguard`` finds it even where the image has its own).
RUNNABLE = ("trainguard.agent.__main__", "trainguard.pod.torchrun", "trainguard.pod.rendezvous_store")
ENTRIES = (*RUNNABLE, "trainguard.sdk")
#: Modules (and, for a package, its modules) that may import torch (the image's), and only inside functions.
LAZY_TORCH = frozenset(
    {
        "trainguard.pod.torchrun",
        "trainguard.pod.livelaunch",
        "trainguard.pod.storelink",
        "trainguard.sdk",
        # The fault tolerance check's GPU compute probe: a matmul through the image's torch, where it has one.
        "trainguard.agent.checks.readings",
    }
)
#: The oldest Python the bundle runs on.
MIN_PYTHON = (3, 8)
#: Standard-library modules that Python 3.8 does not have yet.
NEWER_THAN_MIN = frozenset({"graphlib", "zoneinfo", "tomllib", "_zoneinfo", "_tomllib"})
#: The file naming the bundle's version and modules.
MANIFEST = "BUNDLE"

_PACKAGE = "trainguard"
_SOURCE = Path(__file__).resolve().parent


class BundleError(Exception):
    """The closure cannot be bundled, or DEST cannot hold it; the message is one line for the user."""


@dataclass(frozen=True)
class _Import:
    module: str
    line: int
    #: Inside a function: runs only when called.
    lazy: bool
    #: ``from X import a, b``: the names, which may be modules of package X.
    names: tuple[str, ...] = ()


def closure(entries: Iterable[str] = ENTRIES, source: Path = _SOURCE) -> dict[str, Path]:
    """Module name -> source file, for the entries, every ``trainguard`` module they import (at any depth)
    and the packages above them; raises ``BundleError`` for a module that imports beyond the standard library
    or imports a ``trainguard`` module that does not exist."""
    found: dict[str, Path] = {}
    #: Why a module is in: the module that imported it (None for an entry).
    why: dict[str, str | None] = {}
    queue: list[tuple[str, str | None]] = [(entry, None) for entry in entries]
    while queue:
        name, importer = queue.pop()
        for module in _with_parents(name):
            if module in found:
                continue
            path = _source_of(module, source)
            if path is None:
                raise BundleError(
                    f"{_chain(importer, why)}imports {module}, which is not a module of {source}"
                )
            found[module] = path
            why[module] = importer
            for item in _imports(path, module):
                top = item.module.split(".")[0]
                if top == _PACKAGE:
                    queue.append((item.module, module))
                    for attribute in item.names:  # ``from trainguard.agent import tree``: a module too
                        submodule = f"{item.module}.{attribute}"
                        if _source_of(submodule, source) is not None:
                            queue.append((submodule, module))
                else:
                    _check_external(item, module, why)
    return dict(sorted(found.items()))


def write_bundle(dest: Path) -> list[str]:
    """Write ``dest/trainguard/`` (the closure's ``.py`` files and ``BUNDLE``); the modules, sorted.
    Raises ``BundleError`` when the closure is not stdlib-only or ``dest`` cannot hold it."""
    modules = closure()
    target = dest / _PACKAGE
    _check_dest(dest, target)
    try:
        dest.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".trainguard-bundle-", dir=dest))
    except OSError as error:
        raise BundleError(f"cannot write into {dest}: {error.strerror or error}") from None
    try:
        for path in modules.values():
            relative = path.relative_to(_SOURCE)
            (staging / relative.parent).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, staging / relative)
        (staging / MANIFEST).write_text(_manifest(modules))
        for directory, _, files in os.walk(staging):
            os.chmod(directory, 0o755)
            for file in files:
                os.chmod(os.path.join(directory, file), 0o644)
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=".trainguard-old-", dir=dest))
            target.rename(old / _PACKAGE)
            staging.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(target)
    except OSError as error:
        raise BundleError(f"cannot write the bundle into {dest}: {error.strerror or error}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return list(modules)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainguard.bundle",
        description="Write the in-pod agent's modules (standard library only, Python >= 3.8) to DEST/trainguard, "
        "for images without trainguard: run them with DEST on PYTHONPATH.",
    )
    parser.add_argument(
        "dest", metavar="DEST", help="directory to write trainguard/ into (created if missing)"
    )
    args = parser.parse_args(argv)
    dest = Path(args.dest)
    try:
        modules = write_bundle(dest)
    except BundleError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"trainguard {__version__}: {len(modules)} modules in {dest / _PACKAGE}")
    return 0


def _manifest(modules: dict[str, Path]) -> str:
    lines = [
        f"trainguard {__version__}: the in-pod agent, standard library only",
        f"python: >= {'.'.join(map(str, MIN_PYTHON))}",
        f"run: {', '.join('python -m ' + entry.removesuffix('.__main__') for entry in RUNNABLE)}",
        "modules:",
        *(f"  {module}" for module in modules),
    ]
    return "\n".join(lines) + "\n"


def _check_dest(dest: Path, target: Path) -> None:
    if dest.exists() and not dest.is_dir():
        raise BundleError(f"{dest} is not a directory")
    if target.is_symlink() or (target.exists() and not (target / MANIFEST).is_file()):
        raise BundleError(f"{target} exists and is not a trainguard bundle; not replacing it")


def _may_import_torch(module: str) -> bool:
    return any(module == lazy or module.startswith(lazy + ".") for lazy in LAZY_TORCH)


def _check_external(item: _Import, module: str, why: dict[str, str | None]) -> None:
    top = item.module.split(".")[0]
    where = f"{_chain(module, why)}line {item.line}: import {item.module}"
    if top == "torch" and _may_import_torch(module):
        if not item.lazy:
            raise BundleError(
                f"{where}: torch may be imported only inside functions (the image's torch, when run)"
            )
        return
    if top in NEWER_THAN_MIN:
        raise BundleError(f"{where}: not in the standard library of Python {'.'.join(map(str, MIN_PYTHON))}")
    if top not in sys.stdlib_module_names:
        raise BundleError(
            f"{where}: not in the standard library, and the agent's bundle runs in images that have only that"
        )


def _chain(module: str | None, why: dict[str, str | None]) -> str:
    """``trainguard.x (imported by trainguard.y, imported by ...): `` for an error message."""
    if module is None:
        return ""
    importers: list[str] = []
    importer = why.get(module)
    while importer is not None and len(importers) < 10:
        importers.append(importer)
        importer = why.get(importer)
    via = f" (imported by {', imported by '.join(importers)})" if importers else ""
    return f"{module}{via}: "


def _with_parents(module: str) -> Iterator[str]:
    """``a.b.c`` -> ``a``, ``a.b``, ``a.b.c``: importing a module runs its packages first."""
    parts = module.split(".")
    for end in range(1, len(parts) + 1):
        yield ".".join(parts[:end])


def _source_of(module: str, source: Path) -> Path | None:
    parts = module.split(".")
    if parts[0] != _PACKAGE:
        return None
    base = source.joinpath(*parts[1:])
    for path in (base / "__init__.py", base.with_name(base.name + ".py") if len(parts) > 1 else None):
        if path is not None and path.is_file():
            return path
    return None


def _imports(path: Path, module: str) -> list[_Import]:
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError) as error:
        raise BundleError(f"{module}: cannot read {path}: {error}") from None
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found: list[_Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.orelse:
                visit(statement, lazy)
            return
        if isinstance(node, ast.Import):
            found.extend(_Import(alias.name, node.lineno, lazy) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            found.append(_Import(base, node.lineno, lazy, tuple(alias.name for alias in node.names)))
        inner = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


if __name__ == "__main__":
    sys.exit(main())
