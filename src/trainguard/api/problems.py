"""Pydantic's validation errors, retold for people who write job files.

Each error becomes a ``SpecProblem`` with the field path as written in YAML
(``spec.replicaSpecs.trainer.restartPolicy``) and a message that starts with the field's name and says what is
allowed: ``restartPolicy "OnFailed" is not one of Never, OnFailure, ... (did you mean OnFailure?)``.
"""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Callable
from enum import Enum
from typing import Any, Union, get_args, get_origin

from pydantic import AliasChoices, BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from trainguard.api.errors import SpecProblem
from trainguard.api.fieldpath import FieldPath

#: Makes a problem for a path of the document (knows the file, the lines, and any path mapping).
Reporter = Callable[[FieldPath, str], SpecProblem]

_KIND_OF_TYPE = {
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "dict_type": "a mapping (key: value)",
    "model_type": "a mapping (key: value)",
    "model_attributes_type": "a mapping (key: value)",
    "tuple_type": "a list",
    "list_type": "a list",
    "iterable_type": "a list",
}
_BOUNDS = {
    "greater_than_equal": ("ge", "at least"),
    "less_than_equal": ("le", "at most"),
    "greater_than": ("gt", "more than"),
    "less_than": ("lt", "less than"),
}


def translate(error: ValidationError, root: type[BaseModel], report: Reporter) -> list[SpecProblem]:
    """One problem per field, in the order pydantic found them."""
    by_path: dict[FieldPath, list[tuple[ErrorDetails, _Where]]] = {}
    for detail in error.errors(include_url=False):
        where = _walk(root, detail["loc"])
        by_path.setdefault(where.path, []).append((detail, where))
    problems: list[SpecProblem] = []
    for path, entries in by_path.items():
        kinds = [_KIND_OF_TYPE[d["type"]] for d, _ in entries if d["type"] in _KIND_OF_TYPE]
        if len(kinds) > 1:  # a union (e.g. int or string): say every accepted kind at once
            detail, where = entries[0]
            message = f"{where.name} must be {' or '.join(dict.fromkeys(kinds))}, not {show(detail['input'])}"
            problems.append(report(path, message))
            continue
        for detail, where in entries:
            extra, message = _message(detail, where)
            problems.append(report((*path, *extra), message))
    return problems


class _Where:
    """Where an error points: the path without pydantic's union tags, and what the model says is there."""

    def __init__(
        self, path: FieldPath, annotation: Any, parent: type[BaseModel] | None, info: FieldInfo | None = None
    ) -> None:
        self.path = path
        self.annotation = annotation
        #: The model that holds the last field of the path (None for dict entries and list items).
        self.parent = parent
        #: The model's field the path ends at (None for dict entries and list items).
        self.info = info

    @property
    def name(self) -> str:
        """The field as the message names it: its key, with any list positions after it."""
        tail = ""
        for segment in reversed(self.path):
            if isinstance(segment, int):
                tail = f"[{segment}]{tail}"
            else:
                return f"{segment}{tail}"
        return tail or "the document"


def _walk(root: type[BaseModel], loc: tuple[int | str, ...]) -> _Where:
    annotation: Any = root
    parent: type[BaseModel] | None = None
    info: FieldInfo | None = None
    path: list[str | int] = []
    for segment in loc:
        annotation = _without_none(annotation)
        if _is_model(annotation):
            parent = annotation
            info = field_for_key(annotation, str(segment))
            annotation = info.annotation if info is not None else None
        elif get_origin(annotation) is dict:
            parent, info = None, None
            annotation = get_args(annotation)[1]
        elif get_origin(annotation) in (tuple, list) and isinstance(segment, int):
            parent, info = None, None
            annotation = get_args(annotation)[0]
        elif _is_union(annotation) and isinstance(segment, str):
            continue  # pydantic names the union member it tried; users never wrote that
        else:
            parent, info = None, None
            annotation = None
        path.append(segment)
    return _Where(tuple(path), _without_none(annotation), parent, info)


def field_for_key(model: type[BaseModel], key: str) -> FieldInfo | None:
    """The field of ``model`` that the YAML key ``key`` fills."""
    for info in model.model_fields.values():
        if key in keys_of(info):
            return info
    return None


def keys_of(info: FieldInfo) -> list[str]:
    """Every YAML key that fills this field (its alias, and alternatives such as activeDeadlineSeconds)."""
    if isinstance(info.validation_alias, AliasChoices):
        return [choice for choice in info.validation_alias.choices if isinstance(choice, str)]
    if isinstance(info.validation_alias, str):
        return [info.validation_alias]
    return [info.alias] if info.alias else []


def allowed_keys(model: type[BaseModel]) -> list[str]:
    """The keys a user may write in ``model``, primary names only."""
    return [keys[0] for keys in (keys_of(info) for info in model.model_fields.values()) if keys]


def _message(detail: ErrorDetails, where: _Where) -> tuple[FieldPath, str]:
    """(extra path segments, message) for one error."""
    kind = detail["type"]
    name = where.name
    value = detail["input"]
    ctx = detail.get("ctx") or {}
    if kind == "missing":
        return (), f"{name} is required"
    if kind == "extra_forbidden":
        return (), _unknown_field(name, where)
    if kind == "enum" and isinstance(where.annotation, type) and issubclass(where.annotation, Enum):
        choices = [str(member.value) for member in where.annotation]
        return (), _not_one_of(name, value, choices)
    if kind == "literal_error":
        choices = [str(choice) for choice in get_args(where.annotation)] if where.annotation else []
        return (), _not_one_of(name, value, choices or [str(ctx.get("expected", ""))])
    if kind in _KIND_OF_TYPE:
        return (), f"{name} must be {_KIND_OF_TYPE[kind]}, not {show(value)}{_quote_hint(kind, value)}"
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        limit = _limit(where.info) if key in ("le", "lt") else None
        if limit:  # a limit of trainguard's own: say why, and what to do
            return (), f"{name} {show(value)} is too large: {limit}"
        return (), f"{name} {show(value)} must be {words} {ctx.get(key)}"
    if kind in ("value_error", "assertion_error"):
        return _validator_message(str(ctx.get("error", detail["msg"])), where)
    return (), f"{name}: {detail['msg']}"


def _validator_message(text: str, where: _Where) -> tuple[FieldPath, str]:
    """Messages our validators raise already start with a field name (``minReplicas 4 > maxReplicas 2``)."""
    first = re.match(r"[A-Za-z]+", text)
    annotation = where.annotation
    if first and _is_model(annotation) and first.group() in allowed_keys(annotation):
        return (first.group(),), text  # a model-level check about one of its fields: point at that field
    name = where.name
    if first and first.group() == name:
        return (), text
    if text[:1] in "\"'0123456789[":
        return (), f"{name} {text}"
    return (), f"{name}: {text}"


def _limit(info: FieldInfo | None) -> str | None:
    """The words a field gives for its upper bound (``json_schema_extra={"limit": ...}``), if any."""
    extra = info.json_schema_extra if info is not None else None
    limit = extra.get("limit") if isinstance(extra, dict) else None
    return limit if isinstance(limit, str) else None


def _unknown_field(name: str, where: _Where) -> str:
    parent = where.parent
    if parent is None and len(where.path) > 1:
        return f'unknown field "{name}"'
    model = parent
    if model is None:
        return f'unknown field "{name}"'
    for info in model.model_fields.values():
        keys = keys_of(info)
        if name in keys[1:]:
            return f'"{name}" is another name for "{keys[0]}", which is also given: write only one of them'
    allowed = allowed_keys(model)
    return f'unknown field "{name}"{suggest(name, allowed)}; allowed here: {", ".join(allowed)}'


def _not_one_of(name: str, value: Any, choices: list[str]) -> str:
    return f"{name} {show(value)} is not one of {', '.join(choices)}{suggest(value, choices)}"


def suggest(value: Any, choices: list[str]) -> str:
    """`` (did you mean X?)`` for a near miss: case, snake_case, or a small typo."""
    if not isinstance(value, str) or not choices:
        return ""
    folded = {choice.lower().replace("_", "").replace("-", ""): choice for choice in choices}
    key = value.lower().replace("_", "").replace("-", "")
    if key in folded:
        return f" (did you mean {folded[key]}?)"
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def show(value: Any) -> str:
    """A value as the user wrote it in YAML: strings quoted, true/false/null, lists and mappings by kind."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null (an empty value)"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return str(value)


def _quote_hint(kind: str, value: Any) -> str:
    if kind == "string_type" and isinstance(value, bool | int | float):
        return f" (quote it: {json.dumps(show(value))})"
    if kind.startswith(("int_", "float_", "bool_")) and isinstance(value, str):
        return " (remove the quotes)" if _looks_scalar(value) else ""
    return ""


def _looks_scalar(text: str) -> bool:
    return bool(re.fullmatch(r"[-+]?[0-9]+(\.[0-9]*)?|true|false", text.strip(), flags=re.IGNORECASE))


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType)


def _without_none(annotation: Any) -> Any:
    if _is_union(annotation):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation
