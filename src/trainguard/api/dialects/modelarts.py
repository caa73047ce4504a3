"""ModelArts-style fault-tolerance annotations, on a job of any dialect or in an overlay file.

- ``fault-tolerance/job-retry-num: "N"`` (1-128) -> ``spec.jobRetry.retryNum``: job-level restarts (scope
  All) for environment faults (exceptional events and retryable exit codes).
- ``fault-tolerance/job-unconditional-retry: "true"`` -> ``spec.jobRetry.unconditional``: restart on any
  non-zero exit, at most 3 times in a row.
- ``fault-tolerance/hang-retry: "true"`` -> ``spec.hang`` enabled (restart upon suspension, at most 3
  consecutive times unless ``spec.hang.maxConsecutive`` says otherwise); ``"false"`` turns it off.

An overlay is the JSON that ModelArts' documentation gives, ``{"kind": "job", "metadata": {"annotations":
{...}}}``, applied with ``--overlay FILE`` on top of another job: its annotations are added to the job's,
replacing those with the same key. Values out of range are errors that name the annotation and the file it
came from.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainguard.api.documents import Document
from trainguard.api.errors import SpecError, SpecProblem
from trainguard.api.fieldpath import FieldPath
from trainguard.api.problems import show, suggest

PREFIX = "fault-tolerance/"
JOB_RETRY_NUM = "fault-tolerance/job-retry-num"
UNCONDITIONAL_RETRY = "fault-tolerance/job-unconditional-retry"
HANG_RETRY = "fault-tolerance/hang-retry"
KNOWN = (JOB_RETRY_NUM, UNCONDITIONAL_RETRY, HANG_RETRY)
RETRY_RANGE = (1, 128)
#: ModelArts restarts a hung job in place at most this many times in a row.
HANG_MAX_CONSECUTIVE = 3
OVERLAY_KIND = "job"
_OVERLAY_EXAMPLE = '{"kind": "job", "metadata": {"annotations": {"fault-tolerance/job-retry-num": "3"}}}'


@dataclass(frozen=True)
class Overlay:
    """Annotations to lay over a job, and the document they were read from (for error messages)."""

    annotations: dict[str, str]
    document: Document


_Problem = Callable[[str, str], SpecProblem]
#: Where an annotation's value was written: the document and the path in it.
Origin = tuple[Document, FieldPath]


def annotation_problem(origins: dict[str, Origin], key: str, message: str) -> SpecProblem:
    """A problem with annotation ``key``, at the file and path it was written in (``lay_over``'s origins)."""
    document, path = origins.get(key, (None, ("metadata", "annotations", key)))
    if document is None:
        return SpecProblem("", "", message)
    return document.problem(path, message)


def is_overlay(data: Any) -> bool:
    """A document in the overlay form of ModelArts' documentation rather than a job."""
    return isinstance(data, dict) and "apiVersion" not in data and str(data.get("kind", "")).lower() == "job"


def read_overlay(document: Document) -> Overlay:
    data = document.data
    if not isinstance(data, dict):
        raise SpecError([document.problem((), f"an overlay is a mapping like {_OVERLAY_EXAMPLE}")])
    problems = _unknown_keys(document, (), data, ["kind", "metadata"])
    kind = data.get("kind", OVERLAY_KIND)
    if not isinstance(kind, str) or kind.lower() != OVERLAY_KIND:
        problems.append(
            document.problem(("kind",), f'kind {show(kind)}: an overlay has kind "{OVERLAY_KIND}"')
        )
    metadata = data.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if isinstance(metadata, dict):
        problems.extend(_unknown_keys(document, ("metadata",), metadata, ["annotations"]))
    if not isinstance(annotations, dict) or not annotations:
        problems.append(
            document.problem(
                ("metadata", "annotations"), f"an overlay needs annotations, e.g. {_OVERLAY_EXAMPLE}"
            )
        )
        raise SpecError(problems)
    for key, value in annotations.items():
        if not isinstance(value, str):
            problems.append(
                document.problem(
                    ("metadata", "annotations", key),
                    f"{key} must be a string, not {show(value)} (quote it: {show(show(value))})",
                )
            )
    if problems:
        raise SpecError(problems)
    return Overlay(dict(annotations), document)


def _unknown_keys(
    document: Document, path: FieldPath, data: dict[str, Any], allowed: list[str]
) -> list[SpecProblem]:
    return [
        document.problem(
            (*path, key), f'unknown field "{key}"{suggest(key, allowed)}; allowed here: {", ".join(allowed)}'
        )
        for key in data
        if key not in allowed
    ]


def lay_over(
    data: dict[str, Any], document: Document, overlays: list[Overlay]
) -> tuple[dict[str, Any], dict[str, Origin]]:
    """The native document with the overlays' annotations added, and where each annotation came from."""
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        return data, {}
    annotations = metadata.get("annotations", {})
    if not isinstance(annotations, dict):
        return data, {}  # validation reports the job's own mistake first
    merged = dict(annotations)
    origins: dict[str, Origin] = {key: (document, ("metadata", "annotations", key)) for key in annotations}
    for overlay in overlays:
        for key, value in overlay.annotations.items():
            merged[key] = value
            origins[key] = (overlay.document, ("metadata", "annotations", key))
    if not overlays:
        return data, origins
    return {**data, "metadata": {**metadata, "annotations": merged}}, origins


def apply(data: dict[str, Any], origins: dict[str, Origin]) -> tuple[dict[str, Any], list[SpecProblem]]:
    """The native document with the annotations' settings in ``spec``; returns (document, warnings)."""
    metadata = data.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    spec = data.get("spec")
    if not isinstance(annotations, dict) or not isinstance(spec, dict):
        return data, []
    ours = {
        key: value for key, value in annotations.items() if key.startswith(PREFIX) and isinstance(value, str)
    }
    if not ours:
        return data, []
    problems: list[SpecProblem] = []
    warnings: list[SpecProblem] = []

    def problem(key: str, message: str) -> SpecProblem:
        return annotation_problem(origins, key, message)

    retry_num = _retry_num(ours.get(JOB_RETRY_NUM), problem, problems)
    unconditional = _flag(UNCONDITIONAL_RETRY, ours.get(UNCONDITIONAL_RETRY), problem, problems)
    hang = _flag(HANG_RETRY, ours.get(HANG_RETRY), problem, problems)
    for key in ours:
        if key not in KNOWN:
            warnings.append(
                problem(
                    key,
                    f"{key} is not a fault-tolerance annotation trainguard reads "
                    f"({', '.join(KNOWN)}){suggest(key, list(KNOWN))}; it is ignored",
                )
            )
    if problems:
        raise SpecError(problems)
    spec = copy.deepcopy(spec)
    if retry_num is not None or unconditional is not None:
        job_retry: dict[str, Any] = spec["jobRetry"] if isinstance(spec.get("jobRetry"), dict) else {}
        if retry_num is not None:
            job_retry["retryNum"] = retry_num
        if unconditional is not None:
            job_retry["unconditional"] = unconditional
        spec["jobRetry"] = job_retry
    if hang is not None:
        hang_spec: dict[str, Any] = spec["hang"] if isinstance(spec.get("hang"), dict) else {}
        if hang:
            hang_spec["enabled"] = True
            hang_spec.setdefault("maxConsecutive", HANG_MAX_CONSECUTIVE)
            spec["hang"] = hang_spec
        elif hang_spec:
            hang_spec["enabled"] = False
            spec["hang"] = hang_spec
    return {**data, "spec": spec}, warnings


def _retry_num(value: str | None, problem: _Problem, problems: list[SpecProblem]) -> int | None:
    if value is None:
        return None
    low, high = RETRY_RANGE
    text = value.strip()
    if not re.fullmatch(r"[0-9]{1,4}", text) or not low <= int(text) <= high:
        problems.append(problem(JOB_RETRY_NUM, f'{JOB_RETRY_NUM} "{value}": must be {low}-{high}'))
        return None
    return int(text)


def _flag(key: str, value: str | None, problem: _Problem, problems: list[SpecProblem]) -> bool | None:
    if value is None:
        return None
    folded = value.strip().lower()
    if folded not in ("true", "false"):
        problems.append(problem(key, f'{key} "{value}": must be "true" or "false"'))
        return None
    return folded == "true"
