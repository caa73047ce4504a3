"""Two timeouts any dialect's job sets by annotation, for dialects whose own fields have no place for them
(Kubeflow's PyTorchJob has no hang block and no scaling block):

- ``trainguard.io/hang-timeout-seconds: "600"`` -> ``spec.hang.timeoutSeconds``: no progress for this long is
  a hang (restarted in place where restart upon suspension is on: ``fault-tolerance/hang-retry: "true"`` or
  ``spec.hang.enabled``); a live job's collectives are bounded by it too. It turns nothing on by itself.
- ``trainguard.io/scaling-timeout-seconds: "300"`` -> ``spec.scaling.timeoutSeconds``: a scale-out whose pods
  do not all run within it is rolled back (``spec.scaling.onTimeout``).

An annotation wins over the field it sets, as ModelArts' annotations do. A value that is not a whole number of
seconds in range is an error naming the annotation and the file it came from.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

from trainguard.api.dialects.modelarts import Origin, annotation_problem
from trainguard.api.errors import SpecError, SpecProblem

HANG_TIMEOUT = "trainguard.io/hang-timeout-seconds"
SCALING_TIMEOUT = "trainguard.io/scaling-timeout-seconds"
#: annotation -> (the spec block and field it sets, its range in seconds)
SETS: dict[str, tuple[str, str, int, int]] = {
    HANG_TIMEOUT: ("hang", "timeoutSeconds", 1, 7 * 86400),
    SCALING_TIMEOUT: ("scaling", "timeoutSeconds", 1, 7 * 86400),
}


def apply(data: dict[str, Any], origins: dict[str, Origin]) -> dict[str, Any]:
    """The native document with the annotations' timeouts in ``spec``; SpecError for a bad value."""
    metadata = data.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    spec = data.get("spec")
    if not isinstance(annotations, dict) or not isinstance(spec, dict):
        return data
    given = {key: annotations[key] for key in SETS if isinstance(annotations.get(key), str)}
    if not given:
        return data

    def problem(key: str, message: str) -> SpecProblem:
        return annotation_problem(origins, key, message)

    problems: list[SpecProblem] = []
    spec = copy.deepcopy(spec)
    for key, value in given.items():
        block, field, low, high = SETS[key]
        seconds = _seconds(key, value, low, high, problem, problems)
        if seconds is None:
            continue
        settings = spec[block] if isinstance(spec.get(block), dict) else {}
        if block == "hang" and not settings:
            settings["enabled"] = False  # the timeout alone turns no restart on
        settings[field] = seconds
        spec[block] = settings
    if problems:
        raise SpecError(problems)
    return {**data, "spec": spec}


def _seconds(
    key: str,
    value: str,
    low: int,
    high: int,
    problem: Callable[[str, str], SpecProblem],
    problems: list[SpecProblem],
) -> int | None:
    text = value.strip()
    if not re.fullmatch(r"[0-9]{1,7}", text) or not low <= int(text) <= high:
        problems.append(
            problem(key, f'{key} "{value}": give a whole number of seconds from {low} to {high}, e.g. "600"')
        )
        return None
    return int(text)
