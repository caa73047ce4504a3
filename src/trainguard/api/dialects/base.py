"""What a dialect is: a way to turn one document of its apiVersion/kind into the native TrainingJob."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from trainguard.api.documents import Document
from trainguard.api.errors import SpecError, SpecProblem
from trainguard.api.fieldpath import FieldPath
from trainguard.api.model import TrainingJob
from trainguard.api.problems import translate

M = TypeVar("M", bound=BaseModel)


def same_path(path: FieldPath) -> FieldPath:
    return path


@dataclass(frozen=True)
class Conversion:
    """A document in native form, with what the dialect wants the user to know."""

    data: dict[str, Any]
    warnings: tuple[SpecProblem, ...] = ()
    #: Maps a path of the native form back to where the user wrote that value, for error messages.
    source_path: Callable[[FieldPath], FieldPath] = same_path


def _no_checks(job: TrainingJob, document: Document) -> list[SpecProblem]:
    return []


@dataclass(frozen=True)
class Dialect:
    """A job format trainguard reads. ``convert`` raises ``SpecError``; ``check`` runs on the valid model."""

    name: str
    api_versions: tuple[str, ...]
    kind: str
    convert: Callable[[Document], Conversion]
    check: Callable[[TrainingJob, Document], list[SpecProblem]] = field(default=_no_checks)

    def supported(self) -> list[str]:
        return [f"{api_version} {self.kind}" for api_version in self.api_versions]


def validate_strictly(
    model: type[M],
    data: Any,
    document: Document,
    source_path: Callable[[FieldPath], FieldPath] = same_path,
) -> M:
    """Validate like the Kubernetes API server would: "3" is not a number, and only camelCase keys count."""
    try:
        return model.model_validate_json(json.dumps(data), strict=True, by_name=False)
    except ValidationError as error:
        raise SpecError(
            translate(error, model, lambda path, message: document.problem(source_path(path), message))
        ) from None


def value_at(data: Any, path: FieldPath) -> Any:
    """The value at ``path`` in raw data, or None when the path leads nowhere."""
    node = data
    for segment in path:
        if isinstance(node, dict) and isinstance(segment, str):
            node = node.get(segment)
        elif isinstance(node, list) and isinstance(segment, int) and 0 <= segment < len(node):
            node = node[segment]
        else:
            return None
    return node


def mapping_at(data: Any, path: FieldPath) -> dict[str, Any] | None:
    """The mapping at ``path`` in raw data, or None when there is none."""
    node = value_at(data, path)
    return node if isinstance(node, dict) else None
