"""CCE's ``AITrainingJob`` (``kongming.cce.baiudbce.com/v1``, as the published templates spell it, and
``kongming.cce.baidubce.com/v1``). Its fields are the native ones, one to one; only exit codes differ.

Published templates list codes such as 10001, which no process can report (statuses are 0-255). They are
accepted with a warning and left out of the model, since they can never match: "129,10001" keeps 129, and a
rule that lists nothing else is dropped (later rules move up one place).
"""

from __future__ import annotations

import copy
from typing import Any

from trainguard.api.dialects.base import Conversion, Dialect, mapping_at
from trainguard.api.documents import Document
from trainguard.api.errors import SpecProblem
from trainguard.api.exitcodes import MAX_EXIT_CODE, ExitCodeSet
from trainguard.api.fieldpath import FieldPath
from trainguard.api.model import API_VERSION
from trainguard.api.model import KIND as NATIVE_KIND

KIND = "AITrainingJob"
API_VERSIONS = ("kongming.cce.baiudbce.com/v1", "kongming.cce.baidubce.com/v1")
GROUPS = tuple(api_version.split("/")[0] for api_version in API_VERSIONS)


def convert(document: Document) -> Conversion:
    data: dict[str, Any] = copy.deepcopy(document.data)
    warnings: list[SpecProblem] = []
    # role -> for each kept rule, its position in the user's list
    positions: dict[str, list[int]] = {}
    for role, spec in (mapping_at(data, ("spec", "replicaSpecs")) or {}).items():
        rules = spec.get("faultTolerantPolicy") if isinstance(spec, dict) else None
        if isinstance(rules, list):
            spec["faultTolerantPolicy"], positions[role] = _possible_rules(document, role, rules, warnings)
    data["apiVersion"] = API_VERSION
    data["kind"] = NATIVE_KIND

    def source_path(path: FieldPath) -> FieldPath:
        if len(path) > 4 and path[:2] == ("spec", "replicaSpecs") and path[3] == "faultTolerantPolicy":
            kept = positions.get(str(path[2]), [])
            if isinstance(path[4], int) and path[4] < len(kept):
                return (*path[:4], kept[path[4]], *path[5:])
        return path

    return Conversion(data, tuple(warnings), source_path)


def _possible_rules(
    document: Document, role: str, rules: list[Any], warnings: list[SpecProblem]
) -> tuple[list[Any], list[int]]:
    kept: list[Any] = []
    positions: list[int] = []
    for position, rule in enumerate(rules):
        path = ("spec", "replicaSpecs", role, "faultTolerantPolicy", position, "exitCodes")
        codes = _codes(rule)
        if codes is not None and codes.highest > MAX_EXIT_CODE:
            possible = tuple(
                (low, min(high, MAX_EXIT_CODE)) for low, high in codes.ranges if low <= MAX_EXIT_CODE
            )
            written = f'exitCodes "{codes}": codes above {MAX_EXIT_CODE} cannot occur (exit statuses are 0-{MAX_EXIT_CODE})'
            if not possible:
                warnings.append(
                    document.problem(path, f"{written}; this rule can never match and is left out")
                )
                continue
            rule = {**rule, "exitCodes": str(ExitCodeSet(possible))}
            warnings.append(document.problem(path, f'{written}; using "{rule["exitCodes"]}"'))
        kept.append(rule)
        positions.append(position)
    return kept, positions


def _codes(rule: Any) -> ExitCodeSet | None:
    if not isinstance(rule, dict) or rule.get("exitCodes") is None:
        return None
    try:
        return ExitCodeSet.parse(rule["exitCodes"])
    except ValueError:
        return None  # validation reports it with the field's path


DIALECT = Dialect(name=KIND, api_versions=API_VERSIONS, kind=KIND, convert=convert)
