"""Bytes to plain documents (dicts, lists, str, int, float, bool, None), safely.

Job files come from users and from clusters, so parsing is bounded: a size limit on the file, a depth limit,
and a budget on the *expanded* size while composing, so that alias bombs ("billion laughs") are refused
before anything is expanded. Duplicate keys, non-string keys and unknown tags are errors. Timestamps stay
strings, as in JSON. Every problem is a ``SpecError`` naming the file, the line and, where known, the path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from trainguard.api.errors import SpecError, SpecProblem
from trainguard.api.fieldpath import FieldPath, format_path

#: Kubernetes keeps objects under about 1.5 MiB; a file of several jobs gets some room above that.
MAX_FILE_BYTES = 2 * 1024 * 1024
#: Pod templates nest about 15 levels deep; anything near this limit is not a job.
MAX_DEPTH = 64
#: Nodes after expanding every alias, over the whole file (a large real job has a few thousand).
MAX_EXPANDED_NODES = 250_000
#: Characters of scalars after expanding every alias, over the whole file.
MAX_EXPANDED_CHARS = 8 * 1024 * 1024

_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"
_ALLOWED_TAGS = {
    _STR,
    _MERGE,
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
    "tag:yaml.org,2002:seq",
    "tag:yaml.org,2002:map",
}


@dataclass(frozen=True)
class Document:
    """One document of a file, as plain data, with a way back to the lines it was written on."""

    data: Any
    source: str
    #: 1-based position of the document in its file.
    index: int
    #: The composed YAML tree, for line numbers (None for JSON).
    root: Node | None = field(default=None, repr=False, compare=False)

    def line_of(self, path: FieldPath) -> int | None:
        """The 1-based line where ``path`` (or its nearest written ancestor) is, if known."""
        node = self.root
        if node is None:
            return None
        line: int = node.start_mark.line + 1
        for segment in path:
            child = _child(node, segment)
            if child is None:
                break
            node = child
            line = node.start_mark.line + 1
        return line

    def problem(self, path: FieldPath, message: str) -> SpecProblem:
        return SpecProblem(self.source, format_path(path), message, self.line_of(path))


def parse_documents(data: bytes, source: str) -> list[Document]:
    """Every document in ``data`` (YAML, possibly several; or JSON), empty documents left out."""
    if len(data) > MAX_FILE_BYTES:
        raise SpecError.single(
            source, "", f"the file is larger than {MAX_FILE_BYTES} bytes, the most a job file may have"
        )
    text = _decode(data, source)
    if _looks_like_json(source, text):
        parsed = _parse_json(text, source)
        if parsed is not None:
            return parsed
    return _parse_yaml(text, source)


def _decode(data: bytes, source: str) -> str:
    if b"\x00" in data and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise SpecError.single(source, "", "this is binary data, not a YAML or JSON job file")
    try:
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            return data.decode("utf-16")
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise SpecError.single(
            source,
            "",
            f"not UTF-8 text (byte {error.start} is {data[error.start : error.start + 1]!r}); "
            "save the job file as UTF-8",
        ) from None


def _looks_like_json(source: str, text: str) -> bool:
    return source.lower().endswith(".json") or text.lstrip().startswith(("{", "["))


# --- JSON ---------------------------------------------------------------------------------------------


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _parse_json(text: str, source: str) -> list[Document] | None:
    """The JSON document, or None when the text is not JSON and a ``.json`` name does not insist."""
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except _DuplicateKey as error:
        raise SpecError.single(source, "", f'duplicate key "{error}": write each key once') from None
    except RecursionError:
        raise _too_deep(source, ()) from None
    except json.JSONDecodeError as error:
        if not source.lower().endswith(".json"):
            return None  # YAML flow style also starts with "{": let the YAML parser judge it
        raise SpecError(
            [SpecProblem(source, "", f"not valid JSON: {error.msg} (column {error.colno})", error.lineno)]
        ) from None
    except ValueError as error:  # NaN/Infinity, or an integer too long to convert
        raise SpecError.single(source, "", f"not valid JSON: {error}") from None
    check_plain_size(value, source)
    if value is None:
        return []
    return [Document(value, source, 1)]


def check_plain_size(value: Any, source: str) -> None:
    """Depth and size limits for data that did not come through the YAML composer."""
    nodes = 0
    stack: list[tuple[Any, FieldPath]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        nodes += 1
        if len(path) >= MAX_DEPTH:
            raise _too_deep(source, path)
        if nodes > MAX_EXPANDED_NODES:
            raise SpecError.single(source, "", f"more than {MAX_EXPANDED_NODES} values: not a job file")
        if isinstance(item, dict):
            stack.extend((child, (*path, key)) for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, (*path, index)) for index, child in enumerate(item))


def _too_deep(source: str, path: FieldPath) -> SpecError:
    return SpecError.single(
        source, format_path(path), f"nested more than {MAX_DEPTH} levels deep: not a job file"
    )


# --- YAML ---------------------------------------------------------------------------------------------


class _Resolver(BaseResolver):
    """YAML 1.1 as PyYAML reads it, minus timestamps (kept as strings), base-60 numbers, .inf and .nan.

    Reading no more than PyYAML's own resolver keeps ``yaml.safe_dump`` output reading back as written.
    """


_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$"),
    list("yYnNtTfFoO"),
)
_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(
        r"^(?:[-+]?0b[01][01_]*|[-+]?0x[0-9a-fA-F][0-9a-fA-F_]*|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*))$"
    ),
    list("-+0123456789"),
)
_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    # PyYAML's own form (its dumper quotes exactly the strings that look like this), minus .inf and .nan.
    re.compile(r"^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?)$"),
    list("-+0123456789."),
)
_Resolver.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]
)
_Resolver.add_implicit_resolver(_MERGE, re.compile(r"^<<$"), ["<"])


class _ParseLimit(Exception):
    """Raised inside the composer; turned into a SpecError with the file name outside."""

    def __init__(self, node_or_mark: Any, path: FieldPath, message: str) -> None:
        super().__init__(message)
        mark = getattr(node_or_mark, "start_mark", node_or_mark)
        self.line: int | None = mark.line + 1 if mark is not None else None
        self.path = path
        self.message = message


class _Composer(Composer):
    """Composes nodes while charging a budget for what aliases would expand to, and checking keys."""

    # Provided by the parser the loader mixes in (PyYAML's or libyaml's).
    check_event: Callable[..., bool]
    peek_event: Callable[[], Any]

    def __init__(self) -> None:
        super().__init__()
        self._path: list[str | int] = []
        self._expanded_nodes = 0
        self._expanded_chars = 0
        # Expanded size and height of each finished node, by id (nodes are kept as long as the loader).
        self._sizes: dict[int, tuple[int, int]] = {}
        self._heights: dict[int, int] = {}

    def compose_document(self) -> Node | None:
        # Node ids are only unique among the nodes still held: forget those of earlier documents.
        self._sizes.clear()
        self._heights.clear()
        node: Node | None = super().compose_document()
        return node

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        segment = _segment(index)
        if segment is not None:
            self._path.append(segment)
        try:
            return self._compose(parent, index)
        finally:
            if segment is not None:
                self._path.pop()

    def _compose(self, parent: Node | None, index: Any) -> Node:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:
                if id(target) not in self._sizes:
                    raise _ParseLimit(event.start_mark, tuple(self._path), "an alias refers to itself")
                nodes, chars = self._sizes[id(target)]
                self._charge(nodes, chars, event.start_mark)
                if len(self._path) + self._heights[id(target)] > MAX_DEPTH:
                    raise _ParseLimit(event.start_mark, tuple(self._path), _deep_message())
            return cast(Node, super().compose_node(parent, index))
        if len(self._path) >= MAX_DEPTH:  # this node would be one level deeper than allowed
            raise _ParseLimit(self.peek_event().start_mark, tuple(self._path), _deep_message())
        nodes_before, chars_before = self._expanded_nodes, self._expanded_chars
        node = cast(Node, super().compose_node(parent, index))
        if node.tag not in _ALLOWED_TAGS:
            raise _ParseLimit(node, tuple(self._path), f"the tag {node.tag} is not allowed in a job file")
        if isinstance(node, ScalarNode):
            self._charge(1, len(node.value), node.start_mark)
            height = 1
        else:
            self._charge(1, 0, node.start_mark)
            height = 1 + max((self._heights.get(id(child), 1) for child in _children(node)), default=0)
        if isinstance(node, MappingNode):
            self._check_keys(node)
        self._sizes[id(node)] = (self._expanded_nodes - nodes_before, self._expanded_chars - chars_before)
        self._heights[id(node)] = height
        return node

    def _charge(self, nodes: int, chars: int, mark: Any) -> None:
        self._expanded_nodes += nodes
        self._expanded_chars += chars
        if self._expanded_nodes > MAX_EXPANDED_NODES or self._expanded_chars > MAX_EXPANDED_CHARS:
            raise _ParseLimit(
                mark,
                tuple(self._path),
                "the file expands to too much data (aliases that repeat other aliases, "
                f"or more than {MAX_EXPANDED_NODES} values): not a job file",
            )

    def _check_keys(self, node: MappingNode) -> None:
        seen: dict[str, int] = {}
        for key, _value in node.value:
            if not isinstance(key, ScalarNode):
                raise _ParseLimit(key, tuple(self._path), "a list or a mapping cannot be a key")
            if key.tag not in (_STR, _MERGE):
                raise _ParseLimit(
                    key,
                    tuple(self._path),
                    f"the key {key.value!r} is not a string; quote it: {json.dumps(key.value)}",
                )
            if key.tag == _MERGE:
                continue
            if key.value in seen:
                raise _ParseLimit(
                    key,
                    (*self._path, key.value),
                    f'duplicate key "{key.value}" (first written on line {seen[key.value]}): write each key once',
                )
            seen[key.value] = key.start_mark.line + 1


class _PureLoader(Reader, Scanner, Parser, _Composer, SafeConstructor, _Resolver):
    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        _Composer.__init__(self)
        SafeConstructor.__init__(self)
        _Resolver.__init__(self)


_Loader: type[Any] = _PureLoader
if yaml.__with_libyaml__:  # libyaml scans and parses ten times faster; composing stays ours
    from yaml.cyaml import CParser  # type: ignore[attr-defined]

    class _FastLoader(_Composer, SafeConstructor, _Resolver, CParser):
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _Composer.__init__(self)
            SafeConstructor.__init__(self)
            _Resolver.__init__(self)

    _Loader = _FastLoader


def _parse_yaml(text: str, source: str) -> list[Document]:
    documents: list[Document] = []
    position = 0
    loader = None
    try:
        loader = _Loader(text)
        while loader.check_node():
            position += 1
            root = loader.get_node()
            data = _construct(loader, root, source)
            if data is not None:
                documents.append(Document(data, source, position, root))
    except _ParseLimit as error:
        raise SpecError([SpecProblem(source, format_path(error.path), error.message, error.line)]) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        what = error.problem or error.context or "unreadable"
        where = f" (column {mark.column + 1})" if mark is not None else ""
        line = mark.line + 1 if mark is not None else None
        raise SpecError([SpecProblem(source, "", f"not valid YAML: {what}{where}", line)]) from None
    except yaml.YAMLError as error:  # the reader's complaint about control characters
        raise SpecError.single(source, "", f"not a YAML or JSON text: {error}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return documents


def _construct(loader: Any, root: Node, source: str) -> Any:
    try:
        data = loader.construct_document(root)
        # A JSON round trip unshares what aliases shared, so later edits of one place leave the others alone.
        return json.loads(json.dumps(data, allow_nan=False))
    except yaml.constructor.ConstructorError as error:
        mark = error.problem_mark
        line = mark.line + 1 if mark is not None else None
        raise SpecError([SpecProblem(source, "", f"not valid YAML: {error.problem}", line)]) from None
    except (ValueError, TypeError, IndexError, OverflowError) as error:
        line = root.start_mark.line + 1
        raise SpecError([SpecProblem(source, "", f"a value cannot be read: {error}", line)]) from None


def _segment(index: Any) -> str | int | None:
    if isinstance(index, int):
        return index
    if isinstance(index, ScalarNode):
        return str(index.value)
    return None


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _child(node: Node, segment: str | int) -> Node | None:
    if isinstance(node, SequenceNode) and isinstance(segment, int) and 0 <= segment < len(node.value):
        child: Node = node.value[segment]
        return child
    if isinstance(node, MappingNode) and isinstance(segment, str):
        for key, value in node.value:
            if isinstance(key, ScalarNode) and key.value == segment:
                found: Node = value
                return found
    return None


def _deep_message() -> str:
    return f"nested more than {MAX_DEPTH} levels deep: not a job file"
