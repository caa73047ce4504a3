"""Property: whatever a valid job is mutated into, loading gives a valid model or a clean SpecError."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.api.jobdata import EXAMPLES, cce_job, native, pytorchjob
from trainguard.api import SpecError
from trainguard.api.load import LoadedJob, load_bytes

VALID = [
    cce_job(),
    native(),
    pytorchjob(),
    pytorchjob(master=False, workers=3, elasticPolicy={"minReplicas": 1, "maxReplicas": 4}, nprocPerNode="2"),
    pytorchjob(restart="ExitCode", runPolicy={"backoffLimit": 3, "activeDeadlineSeconds": 60}),
    yaml.safe_load((EXAMPLES / "native-trainingjob.yaml").read_text()),
]

# Words that mean something somewhere in a job, so that mutations hit enums and parsers, not just types.
WORDS = st.sampled_from(
    [
        "Never",
        "OnFailure",
        "Always",
        "ExitCode",
        "OnNodeFail",
        "Pod",
        "All",
        "Any",
        "None",
        "Rank0",
        "1-x",
        "300",
        "129,101",
        "nodeNotReady",
        "hang",
        "true",
        "3",
        "-1",
        "",
        "Worker",
        "Master",
        "c10d",
        "trainguard.io/v1",
        "kubeflow.org/v1",
        "TrainingJob",
        "PyTorchJob",
        "a" * 70,
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    WORDS,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6) | WORDS, inner, max_size=3)
    ),
    max_leaves=6,
)


def paths(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path] if path else []
    if isinstance(data, dict):
        for key, value in data.items():
            found.extend(paths(value, (*path, key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found.extend(paths(value, (*path, index)))
    return found


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    job = copy.deepcopy(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 3))):
        candidates = paths(job)
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        parent: Any = job
        for segment in path[:-1]:
            parent = parent[segment]
        key = path[-1]
        operation = draw(st.sampled_from(["drop", "replace", "retype", "add"]))
        if operation == "drop":
            del parent[key]
        elif operation == "replace":
            parent[key] = draw(VALUES)
        elif operation == "retype":
            value = parent[key]
            parent[key] = draw(st.sampled_from([str(value), [value], {"value": value}, None, 0, True]))
        elif isinstance(parent[key], dict):
            parent[key][draw(st.text(max_size=6) | WORDS)] = draw(VALUES)
    return job


def assert_clean(load: Any) -> list[LoadedJob]:
    """The jobs ``load()`` returns, or [] when it raised a SpecError that names its file and says what."""
    try:
        jobs: list[LoadedJob] = load()
    except SpecError as error:
        problems = error.problems
    else:
        return jobs
    assert problems
    assert all(problem.file and problem.message for problem in problems)
    return []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=mutated(), as_json=st.booleans())
def test_a_mutated_job_is_valid_or_a_clean_error(job: dict[str, Any], as_json: bool) -> None:
    text = json.dumps(job) if as_json else yaml.safe_dump(job)
    source = "job.json" if as_json else "job.yaml"
    for loaded in assert_clean(lambda: load_bytes(text.encode(), source)):
        # What loads converts to a native job that loads back the same.
        again = load_bytes(json.dumps(loaded.job.to_dict()).encode(), "again.json")
        assert [j.job for j in again] == [loaded.job]


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(0, 4000), length=st.integers(0, 40), junk=st.binary(max_size=20))
def test_a_damaged_file_is_valid_or_a_clean_error(cut: int, length: int, junk: bytes) -> None:
    text = yaml.safe_dump(cce_job(), sort_keys=False).encode()
    damaged = text[:cut] + junk + text[cut + length :]
    assert_clean(lambda: load_bytes(damaged, "job.yaml"))


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_are_a_clean_error(data: bytes) -> None:
    assert_clean(lambda: load_bytes(data, "job.yaml"))
