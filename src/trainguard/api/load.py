"""Reading job files: every job in a YAML/JSON file, converted to the native model, or a ``SpecError``.

Public surface, stable for the rest of the code base:
- ``load_jobs(path, overlays=()) -> list[LoadedJob]``: every job in a YAML/JSON file, converted to the native
  model, with overlays (ModelArts-style annotation files) applied; raises ``SpecError``.
- ``load_bytes(data, source, overlays=())`` and ``load_object(obj, source)``: the same for bytes already read
  (stdin) and for an object already parsed (a custom resource from the Kubernetes API).
- ``load_overlay(path) -> Overlay`` and ``LoadedJob``: the job, the dialect it came in, the file it came
  from and any warnings.

Only ``load_jobs`` and ``load_overlay`` touch the file system; everything else is pure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.api import dialects, timeouts
from trainguard.api.dialects import modelarts
from trainguard.api.dialects.base import validate_strictly
from trainguard.api.dialects.modelarts import Overlay
from trainguard.api.documents import MAX_FILE_BYTES, Document, check_plain_size, parse_documents
from trainguard.api.errors import SpecError, SpecProblem
from trainguard.api.model import TrainingJob
from trainguard.api.problems import show


@dataclass(frozen=True)
class LoadedJob:
    job: TrainingJob
    #: The format the job was written in: "TrainingJob", "AITrainingJob" or "PyTorchJob".
    dialect: str
    source: str
    #: Things the user should know that do not stop the job (each names the file and the field).
    warnings: tuple[str, ...] = ()


def load_jobs(path: str | Path, overlays: Sequence[str | Path | Overlay] = ()) -> list[LoadedJob]:
    """Every job in the file at ``path``; overlays are files (or ``Overlay``s) laid over each job."""
    layers = [item if isinstance(item, Overlay) else load_overlay(item) for item in overlays]
    return load_bytes(read_job_file(path), str(path), layers)


def load_bytes(data: bytes, source: str, overlays: Sequence[Overlay] = ()) -> list[LoadedJob]:
    documents = parse_documents(data, source)
    if not documents:
        raise SpecError.single(source, "", "the file is empty: it holds no job")
    return _load_all(documents, overlays)


def load_object(obj: Any, source: str, overlays: Sequence[Overlay] = ()) -> LoadedJob:
    """A job already parsed into plain data (e.g. a custom resource read from the Kubernetes API)."""
    check_plain_size(obj, source)
    try:
        plain = json.loads(json.dumps(obj, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise SpecError.single(source, "", f"not plain JSON data: {error}") from None
    return _load_all([Document(plain, source, 1)], overlays)[0]


def load_overlay(path: str | Path) -> Overlay:
    """An overlay file, as ModelArts' documentation writes one: ``{"kind": "job", "metadata": {...}}``."""
    source = str(path)
    documents = parse_documents(read_job_file(path), source)
    if len(documents) != 1:
        found = "nothing" if not documents else f"{len(documents)} documents"
        raise SpecError.single(source, "", f"an overlay file holds one document; this one holds {found}")
    return modelarts.read_overlay(documents[0])


def read_job_file(path: str | Path) -> bytes:
    """The bytes of a job file, or a ``SpecError`` that says why it cannot be read."""
    source = str(path)
    try:
        with open(path, "rb") as stream:
            # Read one byte past the limit, so that /dev/zero or a huge file is refused, not swallowed.
            return stream.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise SpecError.single(source, "", "no such file") from None
    except IsADirectoryError:
        raise SpecError.single(source, "", "is a directory; give a job file (YAML or JSON)") from None
    except PermissionError:
        raise SpecError.single(source, "", "cannot be read: permission denied") from None
    except OSError as error:
        raise SpecError.single(source, "", f"cannot be read: {error.strerror or error}") from None


def _load_all(documents: Sequence[Document], overlays: Sequence[Overlay]) -> list[LoadedJob]:
    """Every document's job; the problems of all documents together if any fails."""
    jobs: list[LoadedJob] = []
    problems: list[SpecProblem] = []
    for document in documents:
        try:
            jobs.append(_load_document(document, overlays))
        except SpecError as error:
            problems.extend(error.problems)
    if problems:
        raise SpecError(problems)
    return jobs


def _load_document(document: Document, overlays: Sequence[Overlay]) -> LoadedJob:
    data = document.data
    if not isinstance(data, dict):
        raise SpecError(
            [
                document.problem(
                    (),
                    f"document {document.index} is {_kind_of(data)}; a job is a mapping with apiVersion, "
                    "kind, metadata and spec",
                )
            ]
        )
    if modelarts.is_overlay(data):
        raise SpecError(
            [
                document.problem(
                    ("kind",),
                    f'this is an annotation overlay (kind "{data.get("kind")}"), not a job: lay it over a job '
                    f"with --overlay {document.source}",
                )
            ]
        )
    dialect = dialects.find(data.get("apiVersion"), data.get("kind"))
    if dialect is None:
        raise SpecError([_unsupported(document, data)])
    conversion = dialect.convert(document)
    native, origins = modelarts.lay_over(conversion.data, document, list(overlays))
    native, annotation_warnings = modelarts.apply(native, origins)
    native = timeouts.apply(native, origins)
    job = validate_strictly(TrainingJob, native, document, conversion.source_path)
    problems = dialect.check(job, document)
    if problems:
        raise SpecError(problems)
    warnings = (*conversion.warnings, *annotation_warnings)
    return LoadedJob(job, dialect.name, document.source, tuple(str(warning) for warning in warnings))


def _unsupported(document: Document, data: dict[str, Any]) -> SpecProblem:
    api_version, kind = data.get("apiVersion"), data.get("kind")
    supported = ", ".join(dialects.supported())
    if api_version is None:
        return document.problem(("apiVersion",), f"apiVersion is required; trainguard reads {supported}")
    if kind is None:
        return document.problem(("kind",), f"kind is required; trainguard reads {supported}")
    kinds = [dialect.kind for dialect in dialects.DIALECTS if api_version in dialect.api_versions]
    if kinds:
        return document.problem(
            ("kind",), f"kind {show(kind)} is not read for {api_version}; use {', '.join(kinds)}"
        )
    versions = [v for dialect in dialects.DIALECTS if dialect.kind == kind for v in dialect.api_versions]
    if versions:
        return document.problem(
            ("apiVersion",),
            f"apiVersion {show(api_version)} is not read for {kind}; use {', '.join(versions)}",
        )
    return document.problem(
        ("apiVersion",),
        f"{show(api_version)} {show(kind)} is not a job trainguard reads; it reads {supported} "
        "(and ModelArts annotation overlays with --overlay)",
    )


def _kind_of(data: Any) -> str:
    if isinstance(data, list):
        return "a list"
    return f"a single value ({show(data)})"
