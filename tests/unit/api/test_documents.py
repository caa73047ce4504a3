"""Parsing is bounded and strict: bombs, deep nesting, duplicates and garbage end fast with a clean error."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from trainguard.api import SpecError, documents
from trainguard.api.documents import MAX_DEPTH, MAX_FILE_BYTES, parse_documents


@pytest.fixture(params=["libyaml", "pure"], autouse=True)
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every test runs with PyYAML's own parser too, the one a machine without libyaml uses."""
    if request.param == "pure":
        monkeypatch.setattr(documents, "_Loader", documents._PureLoader)
    elif not documents.yaml.__with_libyaml__:
        pytest.skip("PyYAML was built without libyaml")
    return request.param


def problem_of(data: bytes, source: str = "f.yaml") -> str:
    started = time.monotonic()
    with pytest.raises(SpecError) as info:
        parse_documents(data, source)
    assert time.monotonic() - started < 5, "refusing bad input must be fast"
    assert len(info.value.problems) == 1
    return str(info.value)


def billion_laughs(levels: int = 9) -> bytes:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * 10)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return ("\n".join(lines) + "\n").encode()


def test_alias_bomb_is_refused_before_it_expands() -> None:
    message = problem_of(billion_laughs())
    assert "the file expands to too much data" in message
    assert message.startswith("f.yaml:")


def test_alias_bomb_of_long_strings_is_refused() -> None:
    text = "s: &s " + "x" * 100_000 + "\nl: [" + ", ".join(["*s"] * 200) + "]\n"
    assert "expands to too much data" in problem_of(text.encode())


def test_modest_aliases_are_fine() -> None:
    (document,) = parse_documents(
        b"base: &b {cpu: '1'}\nlimits: *b\nrequests: {<<: *b, memory: 1Gi}\n", "f.yaml"
    )
    assert document.data == {
        "base": {"cpu": "1"},
        "limits": {"cpu": "1"},
        "requests": {"cpu": "1", "memory": "1Gi"},
    }


def test_shared_aliases_come_back_unshared() -> None:
    (document,) = parse_documents(b"a: &x {k: 1}\nb: *x\n", "f.yaml")
    document.data["a"]["k"] = 2
    assert document.data["b"] == {"k": 1}


def test_recursive_alias_is_refused() -> None:
    assert "an alias refers to itself" in problem_of(b"a: &x [1, *x]\n")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_deep_nesting_is_refused(depth: int) -> None:
    assert f"nested more than {MAX_DEPTH} levels deep" in problem_of(b"[" * depth + b"]" * depth)


def test_deep_nesting_through_an_alias_is_refused() -> None:
    deep = "[" * 40 + "1" + "]" * 40
    assert f"nested more than {MAX_DEPTH} levels deep" in problem_of(
        f"a: &d {deep}\nb: {'[' * 30}*d{']' * 30}\n".encode()
    )


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_deep_json_is_refused(depth: int) -> None:
    assert "levels deep" in problem_of(b"[" * depth + b"]" * depth, "f.json")


def test_duplicate_keys_name_both_lines() -> None:
    message = problem_of(b"spec:\n  replicas: 1\n  image: x\n  replicas: 2\n")
    assert message == (
        'f.yaml:4: spec.replicas: duplicate key "replicas" (first written on line 2): write each key once'
    )


def test_duplicate_keys_in_json() -> None:
    assert 'duplicate key "a"' in problem_of(b'{"a": 1, "a": 2}', "f.json")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"1: one\n", "the key '1' is not a string; quote it: \"1\""),
        (b"? [a, b]\n: c\n", "a list or a mapping cannot be a key"),
        (b"a: !!binary aGVsbG8=\n", "the tag tag:yaml.org,2002:binary is not allowed"),
        (b"a: !!python/object:os.system {}\n", "is not allowed"),
        (b"a: !custom 1\n", "the tag !custom is not allowed"),
        (b"a: !!int ''\n", "a value cannot be read"),
        (b"a: [1, 2\n", "not valid YAML"),
        (b"a: b: c\n", "not valid YAML: mapping values are not allowed"),
        (b"\tkey: 1\n", "not valid YAML"),
        (b"a: *nowhere\n", "not valid YAML: found undefined alias"),
        (b"a: \x07bell\n", "not a YAML or JSON text"),
        (b"a: !!float .nan\n", "a value cannot be read"),
    ],
)
def test_what_is_not_plain_data_is_refused(text: bytes, expected: str) -> None:
    assert expected in problem_of(text)


@pytest.mark.parametrize(
    "data",
    [
        bytes(range(256)),
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
        b"\x7fELF\x02\x01\x01\x00",
        b"\xff\xd8\xff\xe0 JFIF",
        "café".encode("latin-1"),
    ],
)
def test_binary_garbage(data: bytes) -> None:
    message = problem_of(data)
    assert "binary data" in message or "not UTF-8 text" in message


def test_too_large_a_file() -> None:
    assert f"larger than {MAX_FILE_BYTES} bytes, the most a job file may have" in problem_of(
        b"#" * (MAX_FILE_BYTES + 1)
    )


@pytest.mark.parametrize("text", [b"", b"\n\n", b"# only a comment\n", b"---\n---\n", b"~\n"])
def test_empty_files_hold_no_documents(text: bytes) -> None:
    assert parse_documents(text, "f.yaml") == []


def test_several_documents_and_their_lines() -> None:
    docs = parse_documents(b"a: 1\n---\nb:\n  c: 2\n", "f.yaml")
    assert [d.data for d in docs] == [{"a": 1}, {"b": {"c": 2}}]
    assert [d.index for d in docs] == [1, 2]
    assert docs[1].line_of(("b", "c")) == 4
    assert docs[1].line_of(("b", "missing")) == 4  # the nearest written parent


def test_scalars_read_as_yaml_11_without_surprises() -> None:
    (document,) = parse_documents(
        b"when: 2022-01-14T09:01:52Z\nmode: 0644\nsexagesimal: 1:30\ninf: .inf\nf: 1.5e+3\nflag: on\nn: ~\n",
        "f.yaml",
    )
    assert document.data == {
        "when": "2022-01-14T09:01:52Z",  # timestamps stay strings, as in JSON
        "mode": 0o644,
        "sexagesimal": "1:30",
        "inf": ".inf",
        "f": 1500.0,
        "flag": True,
        "n": None,
    }


def test_yaml_11_booleans_are_not_keys() -> None:
    assert "the key 'yes' is not a string; quote it" in problem_of(b"yes: 1\n")


def test_json() -> None:
    (document,) = parse_documents(b'{"kind": "job", "n": [1, 2.5, true, null]}', "overlay.json")
    assert document.data == {"kind": "job", "n": [1, 2.5, True, None]}
    assert document.line_of(("n",)) is None


def test_json_errors_have_a_line() -> None:
    assert problem_of(b'{\n  "a": 1,\n}', "f.json").startswith("f.json:3: not valid JSON")


def test_json_without_numbers_json_lacks() -> None:
    assert "not valid JSON" in problem_of(b'{"a": NaN}', "f.json")


def test_flow_yaml_that_looks_like_json() -> None:
    (document,) = parse_documents(b"{a: 1, b: [x]}", "f.yaml")
    assert document.data == {"a": 1, "b": ["x"]}


def test_utf16_with_a_bom() -> None:
    (document,) = parse_documents("a: ü\n".encode("utf-16"), "f.yaml")
    assert document.data == {"a": "ü"}


def test_nesting_up_to_the_limit_is_fine() -> None:
    (document,) = parse_documents(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH, "f.yaml")
    assert document.data is not None


@pytest.mark.parametrize(
    "text", ["1.0e5", "-.5", "1:30", "2022-01-14", ".inf", "0b_", "1_000", "0o17", "yes", "~", "1e3"]
)
def test_strings_written_by_pyyaml_read_back_as_strings(text: str) -> None:
    (document,) = parse_documents(documents.yaml.safe_dump({"value": text}).encode(), "f.yaml")
    assert document.data == {"value": text}
